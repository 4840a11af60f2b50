// Package meta owns Sluice's namespace: inodes (files, directories,
// symlinks, fifos, device nodes, socket files), directory entries, hard
// links, attributes, extended attributes and file layouts, and the
// operations on them (mkdir, create, mknod, lookup, stat, list, rename,
// unlink, rmdir, symlink, link, setattr, the xattr calls, statfs); and the
// chunk collector, which removes unlinked files' chunks.
//
// Namespace is the state machine: every mutation is a deterministic
// function of the namespace and its arguments (the caller supplies the
// time), applied atomically in one Pebble batch, so that the Raft group
// replicating the namespace (server/raftstore) can apply the same commands
// on every replica and get the same state. It is not safe to apply two
// mutations at once; Raft applies them one at a time.
//
// Keys: "i" + inode number (big-endian) -> metapb.Inode; "d" + parent inode
// number + name -> child inode number and type; "g" + inode number -> files
// whose last link went, for the chunk collector; "x" + inode number +
// name -> an extended attribute; "w" + inode + client + session -> a write
// session; "c" + inode number -> a small file's bytes, kept inline
// (inline.go); "n" -> the next inode number.
//
// Names are refused (ErrInvalidName) if empty, ".", "..", or if they hold
// '/' or NUL; longer than 255 bytes is ErrNameTooLong, paths longer than
// 4096 bytes too. A request's path is checked name by name the same way
// before anything is proposed (Service's where): an empty, "." or ".."
// name is refused, never resolved, so no path climbs above "/" or the
// directory inode it is relative to. A rename that would move a directory
// under itself is ErrLoop.
package meta
