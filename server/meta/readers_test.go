package meta

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/sluicefs/sluice/fabric"
)

// TestReadLeases: a lease holds for ReadLease from its last renewal, too
// many files in one request are refused, and the table is bounded.
func TestReadLeases(t *testing.T) {
	var l readLeases
	t0 := time.Unix(1000, 0)
	if err := l.renew([]uint64{1, 2}, t0); err != nil {
		t.Fatal(err)
	}
	if !l.held(1, t0.Add(fsmeta.ReadLease-time.Millisecond)) || l.held(1, t0.Add(fsmeta.ReadLease)) || l.held(3, t0) {
		t.Fatal("a lease outside its term")
	}
	if err := l.renew([]uint64{1}, t0.Add(fsmeta.ReadLease/2)); err != nil {
		t.Fatal(err)
	}
	if !l.held(1, t0.Add(fsmeta.ReadLease)) || l.held(2, t0.Add(fsmeta.ReadLease)) {
		t.Fatal("renewal extended the wrong lease")
	}
	if err := l.renew(make([]uint64, fsmeta.MaxKeepOpen+1), t0); !errors.Is(err, fabric.ErrBadRequest) {
		t.Fatalf("an oversized request: %v", err)
	}
	many := make([]uint64, fsmeta.MaxKeepOpen)
	now := t0.Add(time.Hour) // the earlier leases have lapsed
	for i := 0; i < maxReadLeases/fsmeta.MaxKeepOpen; i++ {
		for k := range many {
			many[k] = uint64(i*fsmeta.MaxKeepOpen + k + 10)
		}
		if err := l.renew(many, now); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if err := l.renew([]uint64{1 << 40}, now); !errors.Is(err, fsmeta.ErrTooManyLeases) {
		t.Fatalf("past the bound: %v", err)
	}
	if err := l.renew([]uint64{1 << 40}, now.Add(fsmeta.ReadLease)); err != nil {
		t.Fatalf("once the leases lapse there is room again: %v", err)
	}
}
