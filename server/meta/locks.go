package meta

import (
	"sync"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// lockTable is the file locks clients hold (flock and POSIX), in the
// leader's memory, never in the log: like a read lease a lock is a
// statement about a live client. A client that stops renewing (KeepOpen)
// for fsmeta.ReadLease loses its locks. A new term starts from nothing;
// for its first wait the leader grants no new lock, only learns the ones
// clients hold from their renewals, so that it never grants one that
// conflicts with a lock the old leader granted.
type lockTable struct {
	mu        sync.Mutex
	byIno     map[uint64][]*metapb.Lock
	seen      map[uint64]time.Time // client -> its last renewal or request
	term      uint64
	termStart time.Time
	pruned    time.Time
}

// newTerm forgets what an earlier term held; the caller holds mu.
func (t *lockTable) newTerm(term uint64, now time.Time) {
	if term == t.term && t.byIno != nil {
		return
	}
	t.term, t.termStart = term, now
	t.byIno, t.seen = map[uint64][]*metapb.Lock{}, map[uint64]time.Time{}
}

// prune drops the locks of clients that stopped renewing; the caller
// holds mu.
func (t *lockTable) prune(now time.Time) {
	if now.Sub(t.pruned) < time.Second {
		return
	}
	t.pruned = now
	for client, seen := range t.seen {
		if now.Sub(seen) <= fsmeta.ReadLease {
			continue
		}
		delete(t.seen, client)
		for ino, held := range t.byIno {
			kept := held[:0]
			for _, l := range held {
				if l.Client != client {
					kept = append(kept, l)
				}
			}
			t.setHeld(ino, kept)
		}
	}
}

func (t *lockTable) setHeld(ino uint64, held []*metapb.Lock) {
	if len(held) == 0 {
		delete(t.byIno, ino)
		return
	}
	t.byIno[ino] = held
}

// conflict is a lock in l's way, or nil; the caller holds mu.
func (t *lockTable) conflict(l *metapb.Lock) *metapb.Lock {
	if l.Type == fsmeta.LockUnlock {
		return nil
	}
	for _, h := range t.byIno[l.Ino] {
		if fsmeta.LocksConflict(h, l) {
			return h
		}
	}
	return nil
}

// lock takes, changes or releases l in term, or with test only looks. It
// returns the lock in the way, or retry while a new term is still
// learning (wait).
func (t *lockTable) lock(term uint64, l *metapb.Lock, test bool, wait time.Duration, now time.Time) (conflict *metapb.Lock, retry bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.newTerm(term, now)
	t.prune(now)
	t.seen[l.Client] = now
	if c := t.conflict(l); c != nil || test {
		return c, false
	}
	if l.Type != fsmeta.LockUnlock && now.Sub(t.termStart) < wait {
		return nil, true
	}
	t.setHeld(l.Ino, fsmeta.ApplyLock(t.byIno[l.Ino], l))
	return nil, false
}

// lastHeard is when client last renewed (KeepOpen) or asked for a lock in
// this replica's term as leader; zero if not lately. The collector ends the
// write sessions of clients not heard from for a lease
// (Collector.EndDeadWriters).
func (t *lockTable) lastHeard(client uint64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[client]
}

// renew keeps client's locks; while the term is still learning (wait) it
// takes the locks the client says it holds.
func (t *lockTable) renew(term, client uint64, held []*metapb.Lock, wait time.Duration, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.newTerm(term, now)
	t.seen[client] = now
	if now.Sub(t.termStart) >= wait {
		return
	}
	for _, l := range held {
		if l.Client == client && t.conflict(l) == nil {
			t.setHeld(l.Ino, fsmeta.ApplyLock(t.byIno[l.Ino], l))
		}
	}
}
