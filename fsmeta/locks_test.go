package fsmeta

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluicefs/sluice/proto/metapb"
)

func lk(owner uint64, typ uint32, start, end uint64) *metapb.Lock {
	return &metapb.Lock{Ino: 1, Client: 1, Owner: owner, Type: typ, Start: start, End: end}
}

func ranges(ls []*metapb.Lock) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%d:%d[%d,%d]", l.Owner, l.Type, l.Start, l.End))
	}
	slices.Sort(out)
	return out
}

// TestApplyLock: an owner's locks are replaced where a new one overlaps
// them, split around it, removed by an unlock; other owners' stay.
func TestApplyLock(t *testing.T) {
	held := []*metapb.Lock{lk(1, LockWrite, 0, 99), lk(2, LockRead, 200, 299)}
	cases := []struct {
		name string
		l    *metapb.Lock
		want []string
	}{
		{"read inside a write splits it", lk(1, LockRead, 10, 19), []string{"1:0[10,19]", "1:1[0,9]", "1:1[20,99]", "2:0[200,299]"}},
		{"unlock the head", lk(1, LockUnlock, 0, 49), []string{"1:1[50,99]", "2:0[200,299]"}},
		{"unlock everything of owner 1", lk(1, LockUnlock, 0, LockEnd), []string{"2:0[200,299]"}},
		{"a lock over the whole range replaces it", lk(1, LockRead, 0, 150), []string{"1:0[0,150]", "2:0[200,299]"}},
		{"another owner's unlock leaves owner 1's", lk(3, LockUnlock, 0, LockEnd), []string{"1:1[0,99]", "2:0[200,299]"}},
	}
	for _, tc := range cases {
		if got := ranges(ApplyLock(held, tc.l)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := ranges(held); !slices.Equal(got, []string{"1:1[0,99]", "2:0[200,299]"}) {
		t.Fatalf("ApplyLock changed its input: %v", got)
	}
}

// TestLocksConflict: different owners' overlapping locks conflict when one
// is a write lock; flock and POSIX locks never meet.
func TestLocksConflict(t *testing.T) {
	w := lk(1, LockWrite, 0, 99)
	flock := &metapb.Lock{Ino: 1, Client: 2, Owner: 9, Type: LockWrite, End: LockEnd, Flock: true}
	cases := []struct {
		name string
		a, b *metapb.Lock
		want bool
	}{
		{"write over read", w, lk(2, LockRead, 50, 60), true},
		{"reads share", lk(1, LockRead, 0, 99), lk(2, LockRead, 0, 99), false},
		{"ranges apart", w, lk(2, LockWrite, 100, 200), false},
		{"one owner", w, lk(1, LockWrite, 0, 99), false},
		{"same owner number, other client", w, &metapb.Lock{Ino: 1, Client: 2, Owner: 1, Type: LockWrite, End: 5}, true},
		{"another inode", w, &metapb.Lock{Ino: 2, Client: 2, Owner: 2, Type: LockWrite, End: 5}, false},
		{"flock and POSIX", w, flock, false},
		{"two flocks", flock, &metapb.Lock{Ino: 1, Client: 3, Owner: 9, Type: LockRead, End: LockEnd, Flock: true}, true},
	}
	for _, tc := range cases {
		if got := LocksConflict(tc.a, tc.b); got != tc.want || LocksConflict(tc.b, tc.a) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
