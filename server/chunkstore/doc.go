// Package chunkstore is Sluice's chunk store: the engine that keeps one
// storage target's chunks on a local disk, with at most two versions per
// chunk (committed and pending), checksummed per block, crash-consistent.
// It owns the target's directory: the chunk records (Pebble), the chunk
// files, their trailers and the recent log, and all disk I/O goes through
// its FS seam. It knows nothing of chains, nodes or the network: CRAQ
// replication over it is server/storage's (Engine's StoreRequest options
// are what a chain's node asks of it).
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
// Meta and chunks share the target's directory, and so a file system and a
// device: a sync of either flushes the device's cache for both.
//
// Every version carries a CRC32C of its content and of each 4 KiB block.
// ReadVersion checks every block it touches, so a torn, lost or corrupted
// write is reported as ErrChecksum, never returned as data.
//
// A node serves reads from views of the chunk files (Engine.View: the files
// mapped, read in place in the page cache) and pushes the bytes from there,
// with no copy on the node and without checking them: the CRC the reader
// gets with them is derived from the record's block checksums (whole blocks
// combined; for a range's first and last blocks, from the bytes of the
// block outside the range, the only bytes of a view the node reads), so the
// reader's check of what landed in its memory is the check of every block
// the range touches, end to end, and a damaged block surfaces as
// ErrChecksum at the reader. Views hold no lock while the bytes are sent: a
// writer never waits for a slow reader, and a read whose file was written
// over meanwhile (two commits of the chunk during one send) is answered
// ErrNotCommitted, to be retried.
//
// Chunks can be stored s2-compressed (EngineConfig.Compress), only when that
// saves at least an eighth: incompressible data costs one failed encode,
// nothing more. Compressed versions are read by copy, not viewed.
//
// All chunk-data I/O goes through FS (OSFS; chunkstoretest.FaultFS injects
// errors and lost writes, and its files do not map, so fault tests take
// the copying path).
// Disk full surfaces as ErrNoSpace; the target keeps its last good state
// and stays up.
package chunkstore
