// Package storage is Sluice's storage service: the chunk engine that keeps a
// target's chunks on a local disk, and CRAQ replication of chunks along
// chains of targets on different nodes.
//
// # Chunk engine
//
// A target is a directory: chunk metadata in Pebble (Dir/meta), chunk data
// in files (Dir/chunks), two files per chunk, <inode>-<index>.s0 and .s1. A
// chunk's record (storagepb.ChunkMeta) names at most two versions: the
// committed one, which reads return, and a pending one, written by an update
// still travelling along the chain. A new version is written, in place, into
// the file the committed version is not in, so the committed version's bytes
// are never written while it is committed.
//
// After a crash at any moment (kill -9 or power loss) a chunk reads back as
// its last committed version or, if the next one was being stored, that
// one; never a mixture, and an update a node acknowledged survives power
// loss at that node. That rests on one rule: a node acknowledges a version
// only once its bytes are durable and something durable says it committed
// them: the trailer of a version committed as it was stored, or else a
// synced record.
//
// What is made durable, and when:
//   - The data: written into its file, in place, followed by a 64-byte
//     trailer (chunk, slot, version, lengths, compression, whether the
//     version was committed as it was stored, the content's CRC32C, and a
//     CRC of the trailer), and both synced with one fdatasync. That is the
//     one wait for the disk a version stored at a chain's tail (or in a
//     chain of one) costs, as a plain synced write of the same bytes does
//     (a new file also syncs its directory). Other chain nodes sync while
//     their successors store.
//   - The record of a version committed as stored (tail, chain of one):
//     written to Pebble without a sync, except a chunk's first one, which is
//     synced, so that a chunk with no record was never acknowledged.
//     Waiting for a synced record after the data's sync cost a second wait
//     (a journal commit on Pebble's growing log), a fifth of write
//     throughput here (BENCHMARKS.md).
//   - What finds such a version if its record is lost: its trailer. Before
//     the record is written the chunk is named in the recent log (two small
//     files written with write(2), never synced), which a synced Pebble
//     write every 100 ms retires. Opening the target settles the chunks
//     the log names (a killed process may not have handed its last records
//     to the kernel: Pebble buffers unsynced writes): a trailer marked
//     committed, newer than the record, whose bytes all check out, is
//     synced and committed. If the target was last opened under another
//     boot id (a crash of the machine, which may lose the log too), every
//     chunk with a record is settled that way.
//   - A pending version (stored by a node that is not its chain's tail):
//     its record is not synced, and settling never takes it, so a node
//     never finds itself committed to a version its successors may not
//     have. Its commit, once the successor has committed, is a synced
//     record: the node's own commit survives it.
//   - A resync's full-chunk replacement (Replace): data and trailer synced,
//     the chunk's other file removed, durably (it may hold a higher version
//     a settle would otherwise take), then a synced record. Remove syncs
//     the directory after deleting the files, and a chunk's first version
//     removes a file left in its other slot, for the same reason.
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
// targets share.
//
// Meta and chunks share the target's directory, and so a file system and a
// device: a sync of either flushes the device's cache for both.
//
// Every version carries a CRC32C of its content and of each 4 KiB block.
// ReadVersion checks every block it touches, so a torn, lost or corrupted
// write is reported as ErrChecksum, never returned as data.
//
// A node serves reads from views of the chunk files (Engine.View: the files
// mapped, read in place in the page cache) and pushes the bytes from there,
// with no copy on the node. A range of whole blocks is pushed unchecked: the
// CRC the reader gets with it (RangeCRC) is combined from the record's block
// checksums, not computed from the bytes, so the reader's check of what
// landed in its memory is the blocks' check, end to end, and a damaged block
// still surfaces as ErrChecksum, at the reader. Other ranges are checked on
// the node. Views hold no lock while the bytes are sent: a writer never waits
// for a slow reader, and a read whose file was written over meanwhile (two
// commits of the chunk during one send) is answered ErrNotCommitted, to be
// retried.
//
// Chunk data is checked end to end, which is why fabric need not checksum
// payloads (tcp.Config.DataChecksum is off by default): an update carries the
// writer's CRC32C, which every replica checks before it stores anything (for
// a whole chunk in the same pass that computes the block checksums); a read returns
// the CRC32C of the bytes it pushed, which the client checks in its own
// memory.
//
// Chunks can be stored s2-compressed (EngineConfig.Compress), only when that
// saves at least an eighth: incompressible data costs one failed encode,
// nothing more. Compressed versions are read by copy, not viewed.
//
// All chunk-data I/O goes through FS (OSFS; FaultFS injects errors and lost
// writes, and its files do not map, so fault tests take the copying path).
// Disk full surfaces as ErrNoSpace; the target keeps its last good state
// and stays up.
package storage
