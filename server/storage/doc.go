// Package storage is Sluice's storage service: the chunk engine that keeps a
// target's chunks on a local disk, and (to come) CRAQ replication of chunks
// along chains of targets on different nodes.
//
// # Chunk engine
//
// A target is a directory: chunk metadata in Pebble (Dir/meta), chunk data
// in files (Dir/chunks), one file per stored version, named
// <inode>-<index>.<version>. A chunk's record (storagepb.ChunkMeta) names at
// most two versions: the committed one, which reads return, and a pending
// one, written by an update still travelling along the chain.
//
// Every update is copy-on-write: the new version's whole content goes to a
// new file, which is written and fsynced, and only then does the record
// change, in one synced Pebble write. Commit is one more synced record
// change, after which the old version's file is removed. So after a crash at
// any moment (kill -9 or power loss) a chunk reads back as its last
// committed version or, if the commit record made it, the one after; never a
// mixture, because no file a record names is ever written in place. Files
// that no record names (an update cut short) are removed when the target
// opens.
//
// What is fsynced, and why:
//   - a version's data file, before any record refers to it: otherwise after
//     power loss a record could name bytes that never reached the disk;
//   - the chunks directory, after a version's file is created, so that the
//     file's name survives power loss along with its bytes;
//   - the record that commits a version (Pebble with Sync): a chain node
//     acknowledges an update only once it is committed, and CRAQ counts that
//     acknowledgement as a replica, so it must survive power loss. A tail
//     (or a chain of one) stores and commits in one synced record.
//   - not the record of a pending version: until the commit record lands,
//     losing it to power loss loses only an unacknowledged update, whose file
//     is then an orphan, removed at open; a process crash loses nothing,
//     since the write is in the kernel already.
//
// Every version carries a CRC32C of its content and of each 64 KiB block.
// Reads check every block they touch, so a torn, lost or corrupted write is
// reported as ErrChecksum, never returned as data. Chunks can be stored
// s2-compressed (EngineConfig.Compress), only when that saves at least an
// eighth: incompressible data costs one failed encode, nothing more.
//
// Chunk data is checked end to end, which is why fabric need not checksum
// payloads (tcp.Config.DataChecksum is off by default): an update carries the
// writer's CRC32C, which every replica checks after pulling the bytes; a
// read returns the CRC32C of the bytes it pushed (combined from the checked
// blocks' checksums, so free for aligned ranges), which the client checks
// in its own memory.
//
// All chunk-data I/O goes through FS (OSFS; FaultFS injects errors and lost
// writes). Disk full surfaces as ErrNoSpace; the target keeps its last good
// state and stays up.
package storage
