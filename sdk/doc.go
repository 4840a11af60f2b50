// Package sdk is the Go client of a Sluice cluster: it connects to the
// control plane (gRPC, with the cluster token), follows the routing mgmtd
// publishes, and moves file data to and from storage over fabric. Files
// satisfy io.ReaderAt, io.WriterAt and io.Closer; their chunks are placed on
// chains by the file's layout (meta.ChunkChain).
//
// Not built yet (see the SDK issue): batched I/O across many files, the
// local agent serving shmring clients, the FUSE adapter's semantics.
//
// It may import server APIs, fabric and shmring, never dataset.
package sdk
