// Package storage is Sluice's storage service: a node that serves its
// targets' chunks over fabric and replicates updates with CRAQ along chains
// of targets on different nodes. Each target's chunks are kept by a chunk
// store engine (server/chunkstore, whose package doc says what is durable
// when); this package never touches a target's disk itself.
//
// # Replication under faults
//
// Every update a client makes carries its client id and sequence number
// down the chain, and every forward carries the CRC of the whole new
// version as the head made it:
//   - A number always means the same bytes. A replica whose patch gives
//     other bytes than the head's (another base) stores nothing and answers
//     ErrDiverged, and the head sends the whole version instead; a replica
//     that already committed the number checks the CRC before it calls the
//     forward a retry.
//   - A pending version left by an update that did not finish (its forward
//     failed or its reply was lost, perhaps after the successors committed
//     it) is settled by sending it down the chain again, whole, and
//     committing it: by the head before it numbers the next update, by a
//     serving tail before it answers for the chunk (a read, the head's
//     query, a resync), since a tail that left may have committed it and
//     served it. It was never acknowledged, so it may take effect now.
//   - A client's retry of an update is answered, not applied again: the
//     record of each chunk keeps the (client, seq) of its last few
//     committed updates (ChunkMeta.applied), on every replica and across
//     restarts, and a head finds a retry there (or in memory, while the
//     first attempt still runs).
//
// A node serves only while it holds a lease from mgmtd (NodeConfig.Ready:
// each heartbeat grants one, shorter than the lease after which mgmtd
// takes its targets offline) and routes by a map at least as new as the
// lease's: a node paused or cut off past its lease neither serves stale
// data nor acknowledges anything until it has heard what changed. A node
// that is not ready answers ErrUnavailable, which clients retry, as they
// retry a node that does not know a method yet.
//
// A target's state is per chain (Chain.States): serving, syncing, or
// offline for a chain's last serving replica, kept in the chain while it
// is down because every acknowledged write is on it (the chain serves
// nothing until it returns). A chunk's record names its chain, so a resync
// (sync.go) compares and copies only the chunks of the chain the two
// targets share, and a target that a replica move took out of a chain for
// good drops that chain's chunks after a while (left.go,
// NodeConfig.DropLeft).
//
// A node serves reads from views of the chunk files (chunkstore's
// Engine.View) and pushes the bytes from there, with no copy on the node;
// they go with the CRC chunkstore derives from the record's block
// checksums, so the reader's check is the blocks' check, end to end, and a
// read whose file was written over while it was sent is answered
// ErrNotCommitted, to be retried (see the chunkstore package doc).
//
// An update is pulled into one of the node's staging buffers
// (NodeConfig.Buffers) and held there while it goes down the chain, so an
// update takes one only while enough stay free for the hops after it
// (buffers.go): nodes that head some chains and follow in others never
// fill their buffers with updates that all wait for each other.
//
// Chunk data is checked end to end, which is why fabric need not checksum
// payloads (tcp.Config.DataChecksum is off by default): an update carries the
// writer's CRC32C, which every replica checks before it stores anything (for
// a whole chunk in the same pass that computes the block checksums); a read returns
// the CRC32C of the bytes it pushed, which the client checks in its own
// memory.
package storage
