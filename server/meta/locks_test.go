package meta

import (
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// TestLockTable: grants, conflicts, tests and unlocks; a client that stops
// renewing loses its locks; a new term starts empty, grants nothing while
// it learns, and learns held locks from renewals only then.
func TestLockTable(t *testing.T) {
	var tab lockTable
	t0 := time.Unix(1000, 0)
	wait := 5 * time.Second
	a := &metapb.Lock{Ino: 7, Client: 1, Owner: 1, Type: fsmeta.LockWrite, Start: 0, End: 99}
	b := &metapb.Lock{Ino: 7, Client: 2, Owner: 1, Type: fsmeta.LockWrite, Start: 50, End: 60}
	if c, retry := tab.lock(1, a, false, wait, t0); c != nil || !retry {
		t.Fatalf("a grant while the term learns: conflict %v, retry %v", c, retry)
	}
	now := t0.Add(wait)
	if c, retry := tab.lock(1, a, false, wait, now); c != nil || retry {
		t.Fatalf("a's lock: %v %v", c, retry)
	}
	if c, _ := tab.lock(1, b, false, wait, now); c == nil || c.Client != 1 {
		t.Fatalf("b over a's range: conflict %v", c)
	}
	if c, _ := tab.lock(1, b, true, wait, now); c == nil {
		t.Fatal("testing b found nothing in its way")
	}
	unlockA := &metapb.Lock{Ino: 7, Client: 1, Owner: 1, Type: fsmeta.LockUnlock, Start: 40, End: 70}
	if c, retry := tab.lock(1, unlockA, false, wait, now); c != nil || retry {
		t.Fatalf("unlock: %v %v", c, retry)
	}
	if c, _ := tab.lock(1, b, false, wait, now); c != nil {
		t.Fatalf("b in the hole a unlocked: %v", c)
	}
	// a renews, b does not: b's lock lapses, a's stays.
	later := now.Add(fsmeta.ReadLease + 2*time.Second)
	tab.renew(1, 1, nil, wait, now.Add(fsmeta.ReadLease))
	c := &metapb.Lock{Ino: 7, Client: 3, Owner: 1, Type: fsmeta.LockWrite, Start: 55, End: 55}
	if k, _ := tab.lock(1, c, false, wait, later); k != nil {
		t.Fatalf("b's lapsed lock is in the way: %v", k)
	}
	if k, _ := tab.lock(1, &metapb.Lock{Ino: 7, Client: 3, Owner: 1, Type: fsmeta.LockWrite, Start: 0, End: 0}, true, wait, later); k == nil || k.Client != 1 {
		t.Fatalf("a's renewed lock is gone: %v", k)
	}
	// A new term: empty, learning; a renewal re-asserts a's lock, which
	// then keeps c out.
	t1 := later.Add(time.Second)
	tab.renew(2, 1, []*metapb.Lock{{Ino: 7, Client: 1, Owner: 1, Type: fsmeta.LockWrite, Start: 0, End: 39}}, wait, t1)
	if k, retry := tab.lock(2, &metapb.Lock{Ino: 7, Client: 3, Owner: 2, Type: fsmeta.LockRead, Start: 10, End: 10}, false, wait, t1); k == nil || retry {
		t.Fatalf("the re-asserted lock in a new term: conflict %v, retry %v", k, retry)
	}
	if _, retry := tab.lock(2, &metapb.Lock{Ino: 8, Client: 3, Owner: 2, Type: fsmeta.LockRead, End: 10}, false, wait, t1); !retry {
		t.Fatal("a new grant while the new term learns")
	}
	tab.renew(2, 3, []*metapb.Lock{{Ino: 9, Client: 3, Owner: 1, Type: fsmeta.LockWrite, End: 5}}, wait, t1.Add(wait))
	if k, _ := tab.lock(2, &metapb.Lock{Ino: 9, Client: 4, Owner: 1, Type: fsmeta.LockWrite, End: 5}, true, wait, t1.Add(wait)); k != nil {
		t.Fatalf("a renewal after the learning took a lock: %v", k)
	}
}
