package chunkstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicefs/sluice/chunkio"
)

// TestRecentLog: entries written survive reopening (they are in the
// kernel, not synced), a torn last entry is skipped, retiring empties the
// file it switched away from only after its sync succeeded, and clear
// empties both.
func TestRecentLog(t *testing.T) {
	dir := t.TempDir()
	l, err := openRecent(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := chunkio.ID{Inode: 1, Index: 2}, chunkio.ID{Inode: 3, Index: 4}, chunkio.ID{Inode: 1 << 40, Index: 9}
	for _, id := range []chunkio.ID{a, b} {
		if err := l.note(id); err != nil {
			t.Fatal(err)
		}
	}
	// A torn entry, as a killed writer could leave: 9 of its 16 bytes.
	l.files[l.cur].Write([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	l.close()
	if l, err = openRecent(dir); err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if got, err := l.chunks(); err != nil || !slices.Equal(got, []chunkio.ID{a, b}) {
		t.Fatalf("after reopening: %v %v, want [%v %v]", got, err, a, b)
	}
	l.clear()

	if err := l.note(a); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("sync failed")
	if err := l.retire(func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("retire with a failing sync: %v", err)
	}
	if err := l.note(c); err != nil { // goes to the other file
		t.Fatal(err)
	}
	if got, _ := l.chunks(); !slices.Equal(got, []chunkio.ID{a, c}) && !slices.Equal(got, []chunkio.ID{c, a}) {
		t.Fatalf("a failed sync dropped entries: %v", got)
	}
	if err := l.retire(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.chunks(); !slices.Equal(got, []chunkio.ID{a}) {
		t.Fatalf("after retiring the file holding %v: %v, want [%v] (the other file, not yet retired)", c, got, a)
	}
	if err := l.clear(); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.chunks(); len(got) != 0 {
		t.Fatalf("after clear: %v", got)
	}
	for i := range 2 {
		if st, err := os.Stat(filepath.Join(dir, "recent."+string(rune('0'+i)))); err != nil || st.Size() != 0 {
			t.Fatalf("recent.%d after clear: %v %v", i, st.Size(), err)
		}
	}
}
