// Package storagepb is the generated Go code (committed; see package proto
// for how to regenerate it) of the storage protocol, sluice.storage.v1: the
// bodies of the fabric calls between clients and storage targets and along
// chains (UpdateRequest, ReadRequest, QueryRequest, the resync's
// SyncListRequest and SyncWriteRequest, RemoveRequest), with RemoteBuf naming
// the registered memory a server pulls from or pushes into, and the chunk
// metadata each target keeps in its chunk store (ChunkMeta, Version,
// UpdateTag).
//
// Nothing here is hand-written but this comment. The client and the errors
// are package chunkio; the servers are server/storage and server/chunkstore.
package storagepb
