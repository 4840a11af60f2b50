package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Lock types, as fcntl(2)'s.
const (
	LockRead   = fsmeta.LockRead
	LockWrite  = fsmeta.LockWrite
	LockUnlock = fsmeta.LockUnlock
)

// ErrLocked: a lock of another owner is in the way (EAGAIN).
var ErrLocked = errors.New("sluice: file locked by another owner")

// LockInfo is a file lock: a BSD flock (the whole file) or a POSIX
// byte-range lock of bytes [Start, End] (End fsmeta.LockEnd: to the end of
// the file), of one Owner (the kernel's lock owner: a process's POSIX
// locks, an open file's flocks). An owner's locks of one kind replace each
// other where they overlap, as fcntl(F_SETLK) has it.
type LockInfo struct {
	Type       uint32 // LockRead, LockWrite, LockUnlock
	Start, End uint64
	Flock      bool
	Owner      uint64
	Pid        uint32 // the holder's process (F_GETLK reports it)
}

// heldLocks are the locks this client holds; its renewals carry them, so
// that they outlive a change of metadata leader.
type heldLocks struct {
	mu    sync.Mutex
	locks []*metapb.Lock
}

func (h *heldLocks) apply(l *metapb.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.locks = fsmeta.ApplyLock(h.locks, l)
}

func (h *heldLocks) list() []*metapb.Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*metapb.Lock(nil), h.locks...)
}

// holds reports whether owner holds a lock of that kind on ino.
func (h *heldLocks) holds(ino, owner uint64, flock bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.locks {
		if l.Ino == ino && l.Owner == owner && l.Flock == flock {
			return true
		}
	}
	return false
}

// LockAt takes, changes or releases (Type LockUnlock) lock l on file
// inode ino, held cluster-wide: every client of the cluster sees it. It
// lasts until it is released, or until this client stops renewing it
// (closed, or dead: fsmeta.ReadLease after its last renewal). A lock of
// another owner in the way is ErrLocked at once, or with wait is waited
// for until ctx ends.
func (c *Client) LockAt(ctx context.Context, ino uint64, l LockInfo, wait bool) error {
	pl := &metapb.Lock{Ino: ino, Client: c.id, Owner: l.Owner, Type: l.Type, Start: l.Start, End: l.End, Flock: l.Flock, Pid: l.Pid}
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		cctx, done := c.call(ctx)
		r, err := c.meta.Lock(cctx, &metapb.LockRequest{Lock: pl})
		done()
		if err != nil {
			return fsErr("lock", fmt.Sprint("inode ", ino), err)
		}
		if r.Granted {
			c.locks.apply(pl)
			return nil
		}
		if r.Conflict != nil && !wait {
			return fmt.Errorf("lock inode %d [%d, %d]: %w", ino, l.Start, l.End, ErrLocked)
		}
		select { // a lock in the way, or a new leader still learning the locks held
		case <-ctx.Done():
			return fmt.Errorf("lock inode %d: %w", ino, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// TestLockAt returns a lock of another owner that is in l's way on file
// inode ino (F_GETLK), or nil.
func (c *Client) TestLockAt(ctx context.Context, ino uint64, l LockInfo) (*LockInfo, error) {
	cctx, done := c.call(ctx)
	defer done()
	r, err := c.meta.Lock(cctx, &metapb.LockRequest{Test: true, Lock: &metapb.Lock{Ino: ino, Client: c.id, Owner: l.Owner,
		Type: l.Type, Start: l.Start, End: l.End, Flock: l.Flock, Pid: l.Pid}})
	if err != nil {
		return nil, fsErr("lock", fmt.Sprint("inode ", ino), err)
	}
	if k := r.Conflict; k != nil {
		return &LockInfo{Type: k.Type, Start: k.Start, End: k.End, Flock: k.Flock, Owner: k.Owner, Pid: k.Pid}, nil
	}
	return nil, nil
}

// ReleaseLocksAt releases every lock owner holds of that kind (flock or
// POSIX) on file inode ino, as closing a file does; it asks the cluster
// only if this client holds one.
func (c *Client) ReleaseLocksAt(ctx context.Context, ino, owner uint64, flock bool) error {
	if !c.locks.holds(ino, owner, flock) {
		return nil
	}
	return c.LockAt(ctx, ino, LockInfo{Type: LockUnlock, Start: 0, End: fsmeta.LockEnd, Flock: flock, Owner: owner}, false)
}

// releaseAllLocks gives up every lock this client holds, so that others
// need not wait for them to lapse (Close); it tries for a short while and
// leaves the rest to the lapse.
func (c *Client) releaseAllLocks() {
	held := c.locks.list()
	if len(held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, l := range held {
		if err := c.ReleaseLocksAt(ctx, l.Ino, l.Owner, l.Flock); err != nil {
			c.log.Debug("releasing a lock at close failed; it lapses", "inode", l.Ino, "err", err)
		}
	}
}
