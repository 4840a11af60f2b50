package sdk

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/metapb"
)

// readLeases are the files this client has open for reading. Opening one
// takes a read lease from the metadata leader; while it stays open the
// client renews the leases of all of them every third of fsmeta.ReadLease,
// so that a file unlinked meanwhile keeps its chunks until it is closed
// (files open for writing have sessions instead).
type readLeases struct {
	mu   sync.Mutex
	open map[uint64]int // inode -> open read handles
}

func (l *readLeases) hold(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[uint64]int{}
	}
	l.open[ino]++
}

func (l *readLeases) release(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ino]--; l.open[ino] <= 0 {
		delete(l.open, ino)
	}
}

func (l *readLeases) inodes() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.open))
}

// renewLeases renews the client's read leases, and the file locks it
// holds, every period until ctx ends; while it has files open for writing
// it renews even with neither, for the leader ends the write sessions of a
// client it has not heard from for a lease (meta's Collector.EndDeadWriters).
func (c *Client) renewLeases(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		inodes, locks := c.leases.inodes(), c.locks.list()
		for alive := c.writing.Load() > 0; len(inodes) > 0 || len(locks) > 0 || alive; alive = false {
			n := min(len(inodes), fsmeta.MaxKeepOpen)
			rctx, cancel := context.WithTimeout(ctx, every)
			_, err := c.meta.KeepOpen(rctx, &metapb.KeepOpenRequest{Client: c.id, Inodes: inodes[:n], Locks: locks})
			locks = nil
			cancel()
			if err != nil {
				c.log.Debug("renewing read leases failed", "files", len(inodes), "err", err)
				return
			}
			inodes = inodes[n:]
		}
	})
}

// leaseRenewal is how often open files' read leases are renewed (and a
// writing client's word that it lives). A variable for tests only.
var leaseRenewal = fsmeta.ReadLease / 3
