package meta

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicefs/sluice/fabric"
)

// ReadLease is how long a client's word that it has a file open for
// reading keeps the file's chunks from the collector. Clients renew well
// within it (sdk: every ReadLease/3).
const ReadLease = 30 * time.Second

// Bounds on what clients can make the leader remember: files per
// KeepOpen request, and leases in all.
const (
	MaxKeepOpen   = 1 << 16
	maxReadLeases = 1 << 20
)

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
	if len(inodes) > MaxKeepOpen {
		return fmt.Errorf("%w: %d files in one request, at most %d", fabric.ErrBadRequest, len(inodes), MaxKeepOpen)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until == nil {
		l.until = map[uint64]time.Time{}
	}
	if len(l.until)+len(inodes) > maxReadLeases || now.Sub(l.pruned) > ReadLease {
		for ino, t := range l.until {
			if !now.Before(t) {
				delete(l.until, ino)
			}
		}
		l.pruned = now
		if len(l.until)+len(inodes) > maxReadLeases {
			return fmt.Errorf("%w: %d", ErrTooManyLeases, maxReadLeases)
		}
	}
	for _, ino := range inodes {
		l.until[ino] = now.Add(ReadLease)
	}
	return nil
}

// held reports whether a lease on ino runs at now.
func (l *readLeases) held(ino uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until[ino])
}
