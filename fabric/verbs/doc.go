// Package verbs is fabric over RDMA verbs (libibverbs): InfiniBand or RoCE
// NICs move the data, with one-sided RDMA READ for the write path (servers
// pull) and RDMA WRITE for the read path (servers push), the CPU out of the
// copy.
//
// The transport itself is cgo and builds only with the "verbs" build tag
// (go build -tags verbs; needs libibverbs-dev). What it is built from is
// plain Go and always compiled and tested, device or not:
//
//   - the bootstrap: peers meet over TCP, authenticate with the same
//     handshake as fabric/tcp (fabric/internal/handshake), then exchange
//     queue-pair parameters (qpInfo) and move their RC queue pairs
//     INIT -> RTR -> RTS;
//   - the message format for RPCs over SEND/RECV (msgHeader), received into
//     buffers pre-posted on a shared receive queue;
//   - flow control (credits): a sender never has more SENDs outstanding than
//     the receive buffers its peer granted, nor more one-sided operations in
//     flight than the peer accepts; credits come back piggybacked on replies;
//   - completion demultiplexing (completions): a poller drains many work
//     completions per cgo call and routes each, by work-request id, to the
//     operation waiting for it, turning verbs status codes into the same
//     fabric errors fabric/tcp returns;
//   - NUMA placement of registered memory (numa.go).
//
// Memory is registered once per large region (ibv_reg_mr, zero-based, so a
// RemoteBuf's offset is the remote address), never per I/O; registered
// memory must be C or mmap memory (AllocMemory), never Go heap memory. A
// Read or Write whose local buffer lies outside every registered region is
// staged through a registered bounce buffer: correct, but a copy.
//
// Remote keys, bounds and rights are checked by the NIC, which reports all
// three alike as a remote access error and then breaks the queue pair. The
// transport rebuilds the connection and asks the peer, over an RPC, which
// check failed, so callers see the same distinct errors (ErrUnknownKey,
// ErrRevoked, ErrOutOfBounds, ErrAccessDenied) as on TCP.
package verbs
