package dataset

import (
	"context"
	"testing"
	"time"
)

// TestArenaQuarantine: a piece whose read failed is never handed out
// again, the rest of the arena keeps serving, and the memory is unmapped
// once the arena is closed and every other piece is back — not before.
func TestArenaQuarantine(t *testing.T) {
	a, err := newClientArena(client(t), 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad, err := a.alloc(ctx, 1024)
	if err != nil {
		t.Fatal(err)
	}
	good, err := a.alloc(ctx, 1024)
	if err != nil {
		t.Fatal(err)
	}
	a.quarantine(bad)
	a.release(good)
	// Everything but the quarantined piece can be had, in any split, and
	// nothing overlaps it.
	var held []int
	for range 3 {
		off, err := a.alloc(ctx, 1024)
		if err != nil {
			t.Fatal(err)
		}
		if off < bad+1024 && bad < off+1024 {
			t.Fatalf("piece at %d overlaps the quarantined one at %d", off, bad)
		}
		held = append(held, off)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if off, err := a.alloc(short, 1024); err == nil {
		t.Fatalf("the quarantined piece came back at %d", off)
	}
	a.close()
	for i, off := range held {
		if a.mem.(*clientRegion).buf.B == nil {
			t.Fatalf("memory unmapped with %d pieces still out", len(held)-i)
		}
		a.release(off)
	}
	if a.mem.(*clientRegion).buf.B != nil {
		t.Fatal("memory still mapped after close with only the quarantined piece out")
	}
}
