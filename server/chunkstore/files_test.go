package chunkstore

import (
	"testing"

	"github.com/sluicefs/sluice/chunkio"
)

// closeCounter is a File that only counts its closes.
type closeCounter struct {
	File
	closed *int
}

func (c closeCounter) Close() error { *c.closed++; return nil }

// TestFileCacheSecondChance: the cache holds at most max files; a file read
// since the sweep last passed it outlives one that was not; a file evicted
// while a reader holds it is closed when that reader puts it back, once.
func TestFileCacheSecondChance(t *testing.T) {
	const max = 4
	c := newFileCache(max)
	closed := map[uint32]*int{}
	open := func(slot uint32) *cachedFile {
		t.Helper()
		k := fileKey{id: chunkio.ID{}, slot: slot}
		cf, err := c.get(k, func() (File, error) {
			n := new(int)
			closed[slot] = n
			return closeCounter{closed: n}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return cf
	}
	for s := range uint32(max) {
		c.put(open(s))
	}
	// A sweep that finds every file read clears them all, then takes one.
	held := open(max) // the cache is full: one of 0..3 goes
	if len(c.files) != max {
		t.Fatalf("%d files cached, want %d", len(c.files), max)
	}
	gone := -1
	for s := range uint32(max) {
		if *closed[s] > 1 {
			t.Fatalf("file %d closed %d times", s, *closed[s])
		}
		if *closed[s] == 1 {
			if gone >= 0 {
				t.Fatalf("files %d and %d closed, want one", gone, s)
			}
			gone = int(s)
		}
	}
	if gone < 0 {
		t.Fatal("no file closed past the cache's bound")
	}
	// The sweep cleared the others' flags; read one of them again, and the
	// next file opened must push out one of the two left, not that one.
	keep := uint32((gone + 1) % max)
	again := open(keep)
	if *closed[keep] != 0 {
		t.Fatalf("file %d was closed", keep)
	}
	c.put(again)
	c.put(open(max + 1))
	if *closed[keep] != 0 || *closed[max] != 0 {
		t.Fatalf("a file read since the last sweep was closed (file %d: %d, held file: %d)", keep, *closed[keep], *closed[max])
	}
	n := 0
	for s := range uint32(max) {
		n += *closed[s]
	}
	if n != 2 {
		t.Fatalf("%d of the first files closed, want 2", n)
	}
	// The held file is evicted in time, but stays open until put back.
	for s := uint32(max + 2); !held.evicted; s++ {
		if s > 100 {
			t.Fatal("a file not read again was never evicted")
		}
		c.put(open(s))
	}
	if *closed[max] != 0 {
		t.Fatalf("held file closed %d times while held", *closed[max])
	}
	c.put(held)
	if *closed[max] != 1 {
		t.Fatalf("held file closed %d times after its put, want 1", *closed[max])
	}
	if len(c.files) != max {
		t.Fatalf("%d files cached, want %d", len(c.files), max)
	}
}
