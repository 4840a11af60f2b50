// Package fabric is Sluice's data-plane transport. It owns the API that every
// data byte crosses between clients and storage nodes, and between storage
// nodes in a chain, and it mirrors RDMA verbs so that the storage code above it
// runs unchanged on TCP, inside one process, or on real RDMA hardware:
//
//   - [Endpoint.RegisterMemory] registers a buffer and returns an [MR] whose
//     key is unguessable; [MR.Remote] names a slice of it for a peer as a
//     [RemoteBuf].
//   - [Endpoint.Read] pulls a peer's registered bytes into a local slice (RDMA
//     READ) and [Endpoint.Write] pushes local bytes into a peer's registered
//     memory (RDMA WRITE). [Endpoint.ReadBatch] and [Endpoint.WriteBatch] move
//     many ranges in one round trip per peer.
//   - [Endpoint.Call] is a small-message RPC (SEND/RECV) whose bodies are
//     protobuf messages.
//
// One-sided operations are served by the peer's transport directly against its
// registered regions: key, bounds and access rights are checked on every
// access by [Regions], which every software transport shares, and
// deregistering a region revokes its key at once. Deregister waits for
// accesses already in progress, so when it returns the caller owns the memory
// again.
//
// Errors that cross the wire carry a [Code]; sentinel errors such as
// [ErrUnknownKey] or an application's own [NewError] values keep working with
// errors.Is on both sides of a connection.
//
// Implementations live in sub-packages: fabric/tcp (the default), fabric/local
// (inside one process, used by the embedded cluster), fabric/faulty (fault
// injection for tests, wrapping any transport) and fabric/verbs (libibverbs,
// behind the "verbs" build tag). fabric/fabrictest holds the contract test
// suite that every implementation must pass.
//
// This package imports nothing else of Sluice's and must never do so: it sits
// at the bottom of the layer stack.
package fabric
