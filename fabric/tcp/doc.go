// Package tcp is fabric over TCP: the transport every Sluice process uses by
// default, between clients and storage nodes and along chains. It gives TCP
// the semantics of RDMA verbs that package fabric defines — registered
// memory, one-sided Read (a pull) and Write (a push) against a peer's
// registered regions, and small-message Call — so that storage code runs on
// it unchanged, and passes the same contract suite (fabric/fabrictest) as
// every other transport.
//
// What it owns:
//
//   - Framing (frame.go): a 32-byte header checked by its own CRC32C
//     together with the small meta that follows it (method, descriptors,
//     protobuf body), so a corrupt descriptor never steers bulk data;
//     then the bulk data, with an optional CRC32C trailer
//     (Config.DataChecksum; off by default, since chunk data is checked end
//     to end above the transport). Bulk data goes straight from the socket
//     into its destination — a registered region or the caller's buffer —
//     and is never buffered.
//   - The handshake (endpoint.go, via fabric/internal/handshake): a
//     connection is authenticated in both directions by the cluster secret
//     before anything else is read from it, and each side announces its
//     limits (largest message, requests in flight), which the other keeps
//     to; a peer that exceeds them is cut off.
//   - Connection management (endpoint.go, conn.go, reader.go): an Endpoint
//     listens (Transport.Listen; its address is its node id) or only dials
//     (Transport.Dialer, for clients). Connections are symmetric — either
//     side sends requests on one — and pooled per peer: up to ConnsPerPeer
//     dialed, a new one added only while all are busy. A peer that dialed
//     us is reached over its own connections, so a storage node pushes into
//     a client without dialing it. One reader per connection never writes
//     to the socket (replies go out from the request's own goroutine), so
//     two peers sending large frames at each other both make progress; a
//     frame once begun is written whole whatever its caller's context does.
//     Close fails everything in flight on both sides.
//   - The one-sided operations (ops.go, reader.go): Read asks the peer to
//     stream bytes out of its registered regions; Write sends bytes that the
//     peer's reader stores straight into its registered regions, checking
//     the key, bounds and access rights of each range first. A handler's
//     push into the memory of the peer whose call it serves is posted on the
//     call's own connection ahead of the reply (flagPosted), which then
//     acknowledges it, as a SEND after an RDMA WRITE on one queue pair does:
//     a chunk read costs one round trip.
//
// Registered memory and handler tables are package fabric's (Regions,
// Handlers); Endpoint.Tables hands them to fabric/local, so that a process
// can also serve the same memory to clients in its own process by memory
// copy (local.Network.Attach). Buffers for frames come from power-of-two
// pools (bufpool.go), so a request allocates nothing in steady state.
package tcp
