package chunkstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/chunkstore/chunkstoretest"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// TestDiskFull fills a small tmpfs under a target's chunk directory: the
// write that does not fit fails with ErrNoSpace and is not acknowledged,
// everything committed before stays readable, and writes work again once
// space is freed. Needs root (to mount tmpfs), as CI has.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	chunks := filepath.Join(dir, "chunks")
	os.MkdirAll(chunks, 0o755)
	if err := syscall.Mount("tmpfs", chunks, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount tmpfs (%v): run as root to test a full disk", err)
	}
	t.Cleanup(func() { syscall.Unmount(chunks, 0) })
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{Dir: dir})

	var written []chunkio.ID
	var full error
	for i := 0; i < 10; i++ {
		id := chunkio.ID{Inode: 1, Index: uint32(i)}
		if _, err := e.Prepare(id, 1, 0, fabrictest.RandBytes(uint64(i), 512<<10), true, 1); err != nil {
			full = err
			if m, _ := e.Meta(id); m.Pending != nil || m.Committed != nil {
				t.Fatalf("failed write left a version: %v", m)
			}
			break
		}
		if _, err := e.Commit(id, 1); err != nil {
			t.Fatal(err)
		}
		written = append(written, id)
	}
	if !errors.Is(full, chunkio.ErrNoSpace) {
		t.Fatalf("filling the disk: %v, want ErrNoSpace", full)
	}
	if len(written) == 0 {
		t.Fatal("nothing fit")
	}
	for i, id := range written {
		buf := make([]byte, 512<<10)
		if n, _, err := e.Read(id, 0, buf); err != nil || n != len(buf) || string(buf[:64]) != string(fabrictest.RandBytes(uint64(i), 64)) {
			t.Fatalf("chunk %v after the disk filled: %d bytes, %v", id, n, err)
		}
	}
	if err := e.Remove(written[0]); err != nil {
		t.Fatal(err)
	}
	id := chunkio.ID{Inode: 2}
	if _, err := e.Prepare(id, 1, 0, fabrictest.RandBytes(99, 512<<10), true, 1); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
}
