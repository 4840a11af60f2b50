package chunkstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/chunkstore/chunkstoretest"
	"github.com/sluicefs/sluice/server/internal/pebbledb"
)

func TestEngineReadWrite(t *testing.T) {
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{})
	id := chunkio.ID{Inode: 7, Index: 3}
	if _, _, err := e.Read(id, 0, make([]byte, 10)); !errors.Is(err, chunkio.ErrNotFound) {
		t.Fatalf("read of a missing chunk: %v", err)
	}
	a := fabrictest.RandBytes(1, 300<<10)
	chunkstoretest.Write(t, e, id, 1, 0, a, true)
	if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, a) {
		t.Fatal("full write reads back differently")
	}
	// A partial write overlays and extends.
	b := fabrictest.RandBytes(2, 100<<10)
	chunkstoretest.Write(t, e, id, 2, 250<<10, b, false)
	want := append(append([]byte(nil), a[:250<<10]...), b...)
	if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, want) {
		t.Fatal("partial write reads back differently")
	}
	// Ranges: aligned, unaligned, across blocks, past the end.
	for _, r := range []struct{ off, n int }{{0, 4096}, {65536, 65536}, {1000, 70000}, {349 << 10, 8 << 10}, {350 << 10, 10}, {400 << 10, 10}} {
		buf := make([]byte, r.n)
		n, v, err := e.Read(id, uint32(r.off), buf)
		if err != nil {
			t.Fatalf("read [%d:+%d]: %v", r.off, r.n, err)
		}
		end := min(r.off+r.n, len(want))
		if r.off >= len(want) {
			end = r.off
		}
		if n != end-r.off || !bytes.Equal(buf[:n], want[r.off:end]) || v.Ver != 2 {
			t.Fatalf("read [%d:+%d]: %d bytes of version %d", r.off, r.n, n, v.Ver)
		}
	}
}

func TestEngineVersions(t *testing.T) {
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{})
	id := chunkio.ID{Inode: 1}
	chunkstoretest.Write(t, e, id, 1, 0, []byte("one"), true)
	// Pending is invisible to plain reads until committed.
	if _, err := e.Prepare(id, 2, 0, []byte("two"), true, 1); err != nil {
		t.Fatal(err)
	}
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "one" {
		t.Fatalf("read with an update pending: %q", got)
	}
	buf := make([]byte, 3)
	if n, _, err := e.ReadVersion(id, 2, 0, buf); err != nil || string(buf[:n]) != "two" {
		t.Fatalf("pending read: %q %v", buf[:n], err)
	}
	m, _ := e.Meta(id)
	if m.GetCommitted().GetVer() != 1 || m.GetPending().GetVer() != 2 {
		t.Fatalf("meta %v", m)
	}
	// Re-preparing the same version (a retried forward) replaces it.
	if _, err := e.Prepare(id, 2, 0, []byte("TWO"), true, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Commit(id, 3); !errors.Is(err, chunkio.ErrVersion) {
		t.Fatalf("commit of a version never prepared: %v", err)
	}
	if _, err := e.Commit(id, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Commit(id, 2); err != nil {
		t.Fatalf("repeated commit: %v", err)
	}
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "TWO" {
		t.Fatalf("after commit: %q", got)
	}
	if _, err := e.Prepare(id, 2, 0, []byte("old"), true, 2); !errors.Is(err, chunkio.ErrVersion) {
		t.Fatalf("prepare at the committed version: %v", err)
	}
	if _, err := e.Prepare(id, 9, 4<<20, []byte("x"), false, 2); !errors.Is(err, chunkio.ErrTooLarge) {
		t.Fatalf("write past the chunk size limit: %v", err)
	}
}

func TestEngineRestartAndOrphans(t *testing.T) {
	dir := t.TempDir()
	e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	id := chunkio.ID{Inode: 5, Index: 1}
	chunkstoretest.Write(t, e, id, 1, 0, []byte("committed"), true)
	if _, err := e.Prepare(id, 2, 0, []byte("pending"), true, 1); err != nil {
		t.Fatal(err)
	}
	e.Close()
	// A first write cut short by a crash leaves a file no record names.
	orphan := filepath.Join(dir, "chunks", chunkstore.FileName(chunkio.ID{Inode: 6}, 0))
	os.WriteFile(orphan, []byte("half written"), 0o644)

	e = chunkstoretest.Open(t, chunkstore.EngineConfig{Dir: dir})
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "committed" {
		t.Fatalf("after restart: %q", got)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan chunk file kept: %v", err)
	}
	if _, err := e.Commit(id, 2); err != nil {
		t.Fatalf("commit of the pending version after restart: %v", err)
	}
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "pending" {
		t.Fatalf("after commit: %q", got)
	}
}

func TestEngineDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{Dir: dir})
	id := chunkio.ID{Inode: 9}
	data := fabrictest.RandBytes(3, 200<<10)
	chunkstoretest.Write(t, e, id, 1, 0, data, true)
	// Flip one byte in the second block on disk.
	path := filepath.Join(dir, "chunks", chunkstore.FileName(id, 0))
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{data[70000] ^ 0xff}, 70000)
	f.Close()
	buf := make([]byte, len(data))
	if _, _, err := e.Read(id, 0, buf); !errors.Is(err, chunkio.ErrChecksum) {
		t.Fatalf("read of a corrupted chunk: %v, want ErrChecksum", err)
	}
	if _, _, err := e.Read(id, 70000-5, make([]byte, 10)); !errors.Is(err, chunkio.ErrChecksum) {
		t.Fatalf("small read in the corrupted block: %v, want ErrChecksum", err)
	}
	if n, _, err := e.Read(id, 0, make([]byte, 65536)); err != nil || n != 65536 {
		t.Fatalf("read of an intact block: %d %v", n, err)
	}
	// Views are not checked on the node: the CRC that comes with them is
	// the blocks', so the reader's check of what it got fails when a block
	// the range touches is damaged, inside the range or not.
	for _, r := range []struct {
		off, n  int
		damaged bool
	}{{70000 - 5, 10, true}, {69632 - 100, 200, true}, {70000 + 7, 3000, true}, {0, 65536, false}, {100, 4000, false}, {73728, 4096, false}} {
		view, _, crc, done, ok, err := e.View(id, 0, uint32(r.off), r.n)
		if !ok || err != nil {
			t.Fatalf("view of [%d, +%d): ok %v, %v", r.off, r.n, ok, err)
		}
		if caught := chunkio.CRC(view) != crc; caught != r.damaged {
			t.Fatalf("view of [%d, +%d): damage caught %v, want %v", r.off, r.n, caught, r.damaged)
		}
		if !done() {
			t.Fatal("view not intact")
		}
	}
}

func TestEngineLostWrite(t *testing.T) {
	ffs := chunkstoretest.NewFaultFS(chunkstore.OSFS{})
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{FS: ffs})
	id := chunkio.ID{Inode: 2}
	ffs.Inject(chunkstoretest.Fault{Op: "write", LoseWrites: true})
	chunkstoretest.Write(t, e, id, 1, 0, fabrictest.RandBytes(4, 100<<10), true)
	ffs.Clear()
	if _, _, err := e.Read(id, 0, make([]byte, 100<<10)); !errors.Is(err, chunkio.ErrChecksum) {
		t.Fatalf("read of a lost write: %v, want ErrChecksum", err)
	}
}

func TestEngineDiskErrors(t *testing.T) {
	ffs := chunkstoretest.NewFaultFS(chunkstore.OSFS{})
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{FS: ffs})
	id := chunkio.ID{Inode: 3}
	chunkstoretest.Write(t, e, id, 1, 0, []byte("good"), true)
	for _, f := range []chunkstoretest.Fault{
		{Op: "write", Err: syscall.ENOSPC},
		{Op: "create", Err: syscall.ENOSPC},
		{Op: "sync", Err: syscall.EIO},
		{Op: "create", Err: syscall.EACCES},
	} {
		ffs.Inject(f)
		_, err := e.Prepare(id, 2, 0, []byte("bad"), true, 1)
		ffs.Clear()
		if err == nil {
			t.Fatalf("%+v: prepare succeeded", f)
		}
		if errors.Is(f.Err, syscall.ENOSPC) != errors.Is(err, chunkio.ErrNoSpace) {
			t.Fatalf("%+v: %v", f, err)
		}
		if got := chunkstoretest.ReadAll(t, e, id); string(got) != "good" {
			t.Fatalf("%+v: target lost its good state: %q", f, got)
		}
		if m, _ := e.Meta(id); m.Pending != nil {
			t.Fatalf("%+v: a failed prepare left a pending version", f)
		}
	}
	chunkstoretest.Write(t, e, id, 2, 0, []byte("better"), true)
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "better" {
		t.Fatalf("after errors cleared: %q", got)
	}
}

func TestEngineCompression(t *testing.T) {
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{Compress: true})
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog. "), 20000)
	noise := fabrictest.RandBytes(5, 512<<10)
	for i, data := range [][]byte{text, noise} {
		id := chunkio.ID{Inode: 10, Index: uint32(i)}
		chunkstoretest.Write(t, e, id, 1, 0, data, true)
		m, _ := e.Meta(id)
		if compressible := i == 0; m.Committed.Compressed != compressible {
			t.Fatalf("chunk %d: compressed=%v", i, m.Committed.Compressed)
		}
		if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, data) {
			t.Fatalf("chunk %d reads back differently", i)
		}
		buf := make([]byte, 100)
		if n, _, err := e.Read(id, 70000, buf); err != nil || !bytes.Equal(buf[:n], data[70000:70100]) {
			t.Fatalf("chunk %d range read: %v", i, err)
		}
	}
	m, _ := e.Meta(chunkio.ID{Inode: 10})
	if m.Committed.Stored*4 > m.Committed.Length {
		t.Fatalf("text stored in %d of %d bytes", m.Committed.Stored, m.Committed.Length)
	}
}

func TestEngineChunkOrder(t *testing.T) {
	e := chunkstoretest.Open(t, chunkstore.EngineConfig{})
	ids := []chunkio.ID{{Inode: 2, Index: 0}, {Inode: 1, Index: 300}, {Inode: 1, Index: 2}, {Inode: 1 << 40, Index: 1}, {Inode: 1, Index: 10}}
	for _, id := range ids {
		chunkstoretest.Write(t, e, id, 1, 0, []byte("x"), true)
	}
	var got []chunkio.ID
	e.Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		got = append(got, id)
		return true
	})
	want := []chunkio.ID{{Inode: 1, Index: 2}, {Inode: 1, Index: 10}, {Inode: 1, Index: 300}, {Inode: 2, Index: 0}, {Inode: 1 << 40, Index: 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	if err := e.Remove(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Read(ids[0], 0, make([]byte, 1)); !errors.Is(err, chunkio.ErrNotFound) {
		t.Fatalf("read after remove: %v", err)
	}
}

// TestEngineSettleTakesOnlyCommitted: a reboot never makes a version
// committed that the node had not committed: a pending one (a chain node
// that is not the tail stored it, its successors may never have), the
// higher version a resync replaced, or a removed chunk.
func TestEngineSettleTakesOnlyCommitted(t *testing.T) {
	dir := t.TempDir()
	boot := 0
	open := func() *chunkstore.Engine {
		boot++
		e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir, BootID: fmt.Sprint("boot-", boot)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	pending, replaced, removed := chunkio.ID{Inode: 1}, chunkio.ID{Inode: 2}, chunkio.ID{Inode: 3}
	e := open()
	for _, id := range []chunkio.ID{pending, replaced, removed} {
		if _, err := e.PrepareCommit(id, 1, 0, []byte("one"), true, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Prepare(pending, 2, 0, []byte("two, pending"), true, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.PrepareCommit(replaced, 2, 0, []byte("two"), true, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.Replace(replaced, 0, 1, []byte("one again"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(removed); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = open()
	defer e.Close()
	for id, want := range map[chunkio.ID]string{pending: "one", replaced: "one again"} {
		if got := chunkstoretest.ReadAll(t, e, id); string(got) != want {
			t.Fatalf("chunk %v after a reboot: %q, want %q", id, got, want)
		}
	}
	if _, _, err := e.Read(removed, 0, make([]byte, 8)); !errors.Is(err, chunkio.ErrNotFound) {
		t.Fatalf("removed chunk after a reboot: %v", err)
	}
	if m, _ := e.Meta(pending); m.Pending == nil || m.Pending.Ver != 2 {
		t.Fatalf("the pending version's record after a reboot: %v (want it pending still)", m)
	}
}

// TestEngineRecreatedChunk: a removal whose unlinks failed leaves the
// chunk's files behind; a new chunk of the same name must not have its
// newer version taken from them by a settle.
func TestEngineRecreatedChunk(t *testing.T) {
	dir := t.TempDir()
	ffs := chunkstoretest.NewFaultFS(chunkstore.OSFS{})
	open := func(boot string) *chunkstore.Engine {
		e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir, FS: ffs, BootID: boot})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	id := chunkio.ID{Inode: 4}
	e := open("boot-1")
	for v, data := range []string{"old one", "old two"} {
		if _, err := e.PrepareCommit(id, uint64(v+1), 0, []byte(data), true, 1); err != nil {
			t.Fatal(err)
		}
	}
	ffs.Inject(chunkstoretest.Fault{Op: "remove"})
	if err := e.Remove(id); err == nil {
		t.Fatal("remove with failing unlinks: no error")
	}
	ffs.Clear()
	if _, err := e.PrepareCommit(id, 1, 0, []byte("new"), true, 1); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = open("boot-2")
	defer e.Close()
	if got := chunkstoretest.ReadAll(t, e, id); string(got) != "new" {
		t.Fatalf("after a reboot the re-created chunk reads %q, want %q", got, "new")
	}
}

// TestEngineSettlesAfterReboot: a stored version's record is written
// without a sync, so a crash of the machine may lose it; the version's
// trailer, synced with its data, finds it again. Acted out by putting the
// previous record back behind the engine's back and reopening under
// another boot id. Under the same boot id the record stands (within one
// boot the kernel loses nothing it accepted, and no scan runs); a version
// whose bytes do not check out, or a file that belongs to another chunk,
// is never taken.
func TestEngineSettlesAfterReboot(t *testing.T) {
	for _, compress := range []bool{false, true} {
		dir := t.TempDir()
		boot := 0
		open := func() *chunkstore.Engine {
			e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir, Compress: compress, BootID: fmt.Sprint("boot-", boot)})
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		record := func(e *chunkstore.Engine, id chunkio.ID) []byte {
			v, closer, err := e.DB().Get(chunkstore.ChunkKey(id))
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			return bytes.Clone(v)
		}
		putBack := func(id chunkio.ID, rec []byte) { // the lost record
			db, err := pebbledb.Open(filepath.Join(dir, "meta"), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Set(chunkstore.ChunkKey(id), rec, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}
		content := func(seed uint64) []byte {
			b := fabrictest.RandBytes(seed, 100<<10)
			if compress {
				clear(b[:60<<10])
			}
			return b
		}
		id, other := chunkio.ID{Inode: 9}, chunkio.ID{Inode: 10}
		e := open()
		if _, err := e.PrepareCommit(id, 1, 0, content(1), true, 1); err != nil {
			t.Fatal(err)
		}
		rec1 := record(e, id)
		if _, err := e.PrepareCommit(id, 2, 0, content(2), true, 1); err != nil {
			t.Fatal(err)
		}
		e.Close()
		putBack(id, rec1)

		e = open() // the same boot: the record stands
		if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, content(1)) {
			t.Fatalf("compress=%v: under the same boot id the record was not kept", compress)
		}
		e.Close()

		boot++
		e = open()
		m, _ := e.Meta(id)
		want := chunkstore.NewVersion(2, content(2))
		if m.GetCommitted().GetVer() != 2 || m.Committed.Crc != want.Crc || !slices.Equal(m.Committed.BlockCrcs, want.BlockCrcs) || m.Committed.Compressed != compress {
			t.Fatalf("compress=%v: after a reboot: %v", compress, m)
		}
		if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, content(2)) {
			t.Fatalf("compress=%v: version 2 not found again after a reboot", compress)
		}
		rec2 := record(e, id)

		// Version 3 is damaged on the disk: not taken.
		v3, err := e.PrepareCommit(id, 3, 0, content(3), true, 1)
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
		name := filepath.Join(dir, "chunks", chunkstore.FileName(id, v3.Slot))
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte{0xff, 0x00, 0xff}, 1000)
		f.Close()
		putBack(id, rec2)
		boot++
		e = open()
		if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, content(2)) {
			t.Fatalf("compress=%v: a damaged version was taken", compress)
		}

		// A file of another chunk in the free slot: not taken.
		ov, err := e.PrepareCommit(other, 7, 0, content(4), true, 1)
		if err != nil {
			t.Fatal(err)
		}
		m, _ = e.Meta(id)
		e.Close()
		foreign, err := os.ReadFile(filepath.Join(dir, "chunks", chunkstore.FileName(other, ov.Slot)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "chunks", chunkstore.FileName(id, chunkstore.FreeSlot(m))), foreign, 0o644); err != nil {
			t.Fatal(err)
		}
		boot++
		e = open()
		if got := chunkstoretest.ReadAll(t, e, id); !bytes.Equal(got, content(2)) {
			t.Fatalf("compress=%v: another chunk's file was taken", compress)
		}
		e.Close()
	}
}
