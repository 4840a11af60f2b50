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
// its last committed version or, if the commit of the next one was under
// way, that one; never a mixture, and an update a node acknowledged survives
// power loss at that node. That rests on one rule: no record durably names a
// version committed before its bytes are durable, except under a promotion
// mark that opening the target settles by checking the bytes.
//
// What is made durable, and when:
//   - The data: written into its file, then written back to the device
//     without a flush of the device's cache (sync_file_range) when the write
//     is in place (the file's size unchanged and its blocks durably
//     allocated since the engine opened: no metadata to make durable), else
//     synced with fdatasync (and the directory, for a new file).
//   - Committing (a chain's tail and a chain of one as they store, other
//     nodes once their successor has committed): one synced Pebble batch
//     naming the version pending with a promotion mark, then, unsynced, the
//     record that commits it and clears the mark. The batch's sync flushes
//     the device's cache, which makes data written back before it durable
//     too: one flush per stored version, as a plain synced write of the same
//     bytes costs, where a data sync followed by a record sync cost two and
//     halved throughput on this kind of disk (BENCHMARKS.md). The commit
//     record reaches the disk with the next synced write of any chunk.
//   - Opening the target settles every mark: a marked pending version whose
//     bytes all check out is committed (its node may have acknowledged it);
//     one that does not is dropped (its node did not: acknowledgement waits
//     for the synced batch, which follows the data's write-back or sync).
//     There are at most as many marks as commits in flight at the crash,
//     plus those whose clearing had not reached the disk.
//   - Not the record of a pending version before its commit: losing it to
//     power loss loses only an unacknowledged update, whose bytes then sit
//     unnamed in a file no record points to.
//   - A resync's full-chunk replacement (Replace): data synced, then a
//     synced record.
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
// writes, and its files neither map nor write back, so fault tests take the
// copying and syncing paths). Disk full surfaces as ErrNoSpace; the target
// keeps its last good state and stays up.
package storage
