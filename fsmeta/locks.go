package fsmeta

import (
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/metapb"
)

// Lock types, as fcntl(2)'s l_type.
const (
	LockRead   = 0 // F_RDLCK
	LockWrite  = 1 // F_WRLCK
	LockUnlock = 2 // F_UNLCK
)

// LockEnd is the end of a lock that runs to the end of the file.
const LockEnd = ^uint64(0)

// SameLockOwner reports whether a and b belong to one owner: one inode, one
// client, one lock owner, and one kind (flock or POSIX, which Linux keeps
// apart).
func SameLockOwner(a, b *metapb.Lock) bool {
	return a.Ino == b.Ino && a.Client == b.Client && a.Owner == b.Owner && a.Flock == b.Flock
}

// LocksConflict reports whether a and b cannot be held together: locks of
// one kind on one inode, of different owners, whose ranges overlap, one of
// them a write lock.
func LocksConflict(a, b *metapb.Lock) bool {
	return a.Ino == b.Ino && a.Flock == b.Flock && !SameLockOwner(a, b) &&
		a.Start <= b.End && b.Start <= a.End &&
		(a.Type == LockWrite || b.Type == LockWrite)
}

// ApplyLock returns held after l, a lock or an unlock, takes the place of
// what its owner held on l's range, as fcntl(F_SETLK) has it: the owner's
// locks there are cut out (one that l falls inside split in two) and l,
// unless an unlock, is added. Other owners' locks are kept. held is not
// changed.
func ApplyLock(held []*metapb.Lock, l *metapb.Lock) []*metapb.Lock {
	out := make([]*metapb.Lock, 0, len(held)+1)
	for _, h := range held {
		if !SameLockOwner(h, l) || h.End < l.Start || l.End < h.Start {
			out = append(out, h)
			continue
		}
		if h.Start < l.Start {
			left := proto.Clone(h).(*metapb.Lock)
			left.End = l.Start - 1
			out = append(out, left)
		}
		if h.End > l.End {
			right := proto.Clone(h).(*metapb.Lock)
			right.Start = l.End + 1
			out = append(out, right)
		}
	}
	if l.Type != LockUnlock {
		out = append(out, l)
	}
	return out
}
