// Package fuse mounts a Sluice cluster as a POSIX file system through the
// kernel's FUSE interface (github.com/hanwen/go-fuse/v2, raw
// fuse.RawFileSystem API, 1 MiB requests).
//
// It owns the translation between kernel requests and SDK calls and
// nothing else: FUSE node ids are Sluice inode numbers (the root is inode 1
// on both sides), every name the kernel sends is resolved relative to its
// directory inode with the SDK's *At calls, and the semantics (what rename
// replaces, what truncate drops, what a file's length is after close) live
// in the SDK and the metadata service. What it keeps itself is what only a
// mount has: the open-file table (one SDK file per inode, shared by the
// kernel's handles on it), sequential readahead into registered memory,
// a block cache for readers that come back to what they read, O_DIRECT
// ones too (cache.go: bounded, dropped at every open of the file), both
// handed to the kernel as they are (reply.go: pinned until written), the
// files' states at their last open here, which say whether the kernel may
// keep their pages at the next (pages.go),
// write-behind (writeback.go: writes return once the mount holds the
// bytes; close, fsync and reads wait for them),
// directory listings between opendir and releasedir, directories listed in
// bulk to answer a run of lookups (names.go: never past the entry and
// attribute timeouts, this mount's own changes applied at once), the files known for a
// moment to have no security.capability (which the kernel reads before
// every write), and the mapping of errors to errno values.
//
// Permission checks are the kernel's (the default_permissions mount
// option), against the mode, owner and group the metadata service keeps,
// exactly as for a local file system.
//
// It must never hold file data past a request except in readahead windows
// and cached blocks, which a write to the file and every open of it
// discard (close-to-open), and write-behind buffers, bounded by
// the mount's budget and drained by every request that must see the bytes;
// and it must never decide POSIX semantics
// on its own. The node-local agent serving shmring clients (the USRBIO path)
// runs beside the mount in the same process (see cmd/sluice mount) but is
// not part of this package.
package fuse
