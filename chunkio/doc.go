// Package chunkio is the storage service's contract with its clients and
// the client itself: chunk ids, the fabric methods a storage node serves,
// the errors it answers with (which keep their identity across fabric
// calls), the CRC32C every chunk check uses, and Client, which writes
// chunks through a chain's head and reads them from its serving replicas,
// retrying what new routing can cure.
//
// It imports the routing contract and fabric, never the storage servers:
// the SDK and everything above it links no Raft and no Pebble through it.
package chunkio
