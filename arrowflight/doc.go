// Package arrowflight serves Sluice datasets to any Arrow Flight client
// (pyarrow.flight, the Go, Java and C++ clients, DuckDB and Spark
// connectors): ListFlights lists datasets with their schemas and sample
// counts; GetFlightInfo turns a command (Command: a dataset and loader
// options, a resume state among them) into one endpoint per rank; DoGet
// streams one rank's batches in loader order, each carrying the loader
// state after it as app metadata, so a client that reconnects with that
// state continues exactly; DoPut imports a stream of record batches as a
// new dataset through the importers' writer.
//
// It owns the Flight protocol mapping (descriptors, tickets, app metadata,
// status codes) and the server's limits: at most MaxStreams streams at a
// time, each holding at most its loader's memory budget. It is a client
// of the cluster (sdk, dataset) and must never reach below them: no
// storage or metadata server code, no second batch format. Batches go out
// from the loader's own buffers: the IPC writer reads the arrays the
// loader made over its registered memory, and gRPC is handed those
// buffers as they are (send.go), copying them only into its HTTP/2
// frames; the batch is held until gRPC lets go of them.
//
// Every call must carry the cluster token as a bearer header
// ("authorization: Bearer TOKEN"); the check is auth.TokenAuth's
// constant-time compare. TLS is on when Config.TLS is set.
package arrowflight
