package meta

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/sluicefs/sluice/fabric"
)

// maxReadLeases bounds the leases the leader keeps (fsmeta.MaxKeepOpen
// bounds one request).
const maxReadLeases = 1 << 20

// readLeases are the files clients hold open for reading, in memory on
// the leader, never in the log: a lease is a statement about a live
// client, worthless after it, and each is renewed before it lapses. (A
// new leader holds every file for a lease's length first: see Collector.)
type readLeases struct {
	mu     sync.Mutex
	until  map[uint64]time.Time // inode -> when its last lease ends
	pruned time.Time
}

// renew extends the leases on inodes until now+ReadLease.
func (l *readLeases) renew(inodes []uint64, now time.Time) error {
	if len(inodes) > fsmeta.MaxKeepOpen {
		return fmt.Errorf("%w: %d files in one request, at most %d", fabric.ErrBadRequest, len(inodes), fsmeta.MaxKeepOpen)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until == nil {
		l.until = map[uint64]time.Time{}
	}
	if len(l.until)+len(inodes) > maxReadLeases || now.Sub(l.pruned) > fsmeta.ReadLease {
		for ino, t := range l.until {
			if !now.Before(t) {
				delete(l.until, ino)
			}
		}
		l.pruned = now
		if len(l.until)+len(inodes) > maxReadLeases {
			return fmt.Errorf("%w: %d", fsmeta.ErrTooManyLeases, maxReadLeases)
		}
	}
	for _, ino := range inodes {
		l.until[ino] = now.Add(fsmeta.ReadLease)
	}
	return nil
}

// held reports whether a lease on ino runs at now.
func (l *readLeases) held(ino uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until[ino])
}
