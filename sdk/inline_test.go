package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluicefs/sluice/server/cluster"
)

// storedBytes is how many bytes chunk 0 of file p holds on storage.
func storedBytes(t *testing.T, cl *Client, p string) int {
	t.Helper()
	ctx := context.Background()
	f, err := cl.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, err := cl.NewBuffer(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	n, _, err := cl.store.ReadRegistered(ctx, f.chain(0), f.chunk(0), 0, buf.mr, 0, buf.B, false)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readBoth reads file p whole through ReadAt and, separately, through a
// batched read (the loader's and the mount's path), and checks they agree.
func readBoth(t *testing.T, cl *Client, p string) []byte {
	t.Helper()
	ctx := context.Background()
	f, err := cl.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, f.Size()+10)
	n, err := f.ReadAt(got, 0)
	if err != io.EOF || int64(n) != f.Size() {
		t.Fatalf("read %s: %d of %d bytes, %v", p, n, f.Size(), err)
	}
	buf, err := cl.NewBuffer(int(f.Size()) + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	if err := cl.ReadBatch(ctx, []ReadOp{{File: f, Off: 0, N: int(f.Size()), Buf: buf}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.B[:n], got[:n]) {
		t.Fatalf("%s: a batched read and ReadAt disagree", p)
	}
	return got[:n]
}

// TestSmallFilesInline: a small file's bytes go to the metadata service
// at close, none to storage, and read back from another client, through
// ReadAt and batched reads; rewrites within the limit stay inline; a
// write past it, another writer, a batched write or a hole move the bytes
// to chunks and nothing is lost; truncate and sync work on either; with
// inline_max off, bytes go to chunks.
func TestSmallFilesInline(t *testing.T) {
	c := startCluster(t, t.TempDir())
	w, r := connect(t, c), connect(t, c)
	ctx := context.Background()

	// Written in pieces, with a gap that reads as zeros.
	f, err := w.Create(ctx, "/s")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1000)
	copy(want, "hello")
	copy(want[990:], "0123456789")
	if _, err := f.WriteAt(want[:5], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(want[990:], 990); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 5)
	if _, err := f.ReadAt(back, 0); err != nil || string(back) != "hello" {
		t.Fatalf("the writer reads %q, %v", back, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, r, "/s"); !bytes.Equal(got, want) {
		t.Fatalf("/s reads %d bytes, want %d", len(got), len(want))
	}
	if n := storedBytes(t, r, "/s"); n != 0 {
		t.Fatalf("an inline file has %d bytes on storage", n)
	}
	if st, err := r.Stat(ctx, "/s"); err != nil || st.Size() != 1000 {
		t.Fatalf("stat /s: %v %v", st, err)
	}
	if u, err := r.Statfs(ctx); err != nil || u.InlineFiles != 1 || u.InlineBytes != 1000 {
		t.Fatalf("statfs: %d files, %d bytes inline (want 1, 1000), %v", u.InlineFiles, u.InlineBytes, err)
	}

	// Rewritten in place within the limit: still inline.
	f, err = w.OpenFile(ctx, "/s", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("XY"), 3); err != nil {
		t.Fatal(err)
	}
	copy(want[3:], "XY")
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, r, "/s"); !bytes.Equal(got, want) { // visible at fsync
		t.Fatalf("after sync /s reads %q…", got[:8])
	}
	// Past the limit: the bytes move to chunks, the rest follows them.
	big := bytes.Repeat([]byte{7}, 10000)
	if _, err := f.WriteAt(big, 500); err != nil {
		t.Fatal(err)
	}
	want = append(want[:500], big...)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, r, "/s"); !bytes.Equal(got, want) {
		t.Fatalf("after outgrowing the limit /s reads %d bytes, want %d (equal prefix %v)", len(got), len(want), bytes.HasPrefix(want, got[:min(len(got), 500)]))
	}
	if n := storedBytes(t, r, "/s"); n != len(want) {
		t.Fatalf("after outgrowing the limit storage holds %d bytes, want %d", n, len(want))
	}

	// Truncate: shorter, then longer (zeros), on an inline file.
	if err := w.WriteFile(ctx, "/t", bytes.Repeat([]byte("t"), 3000)); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(ctx, "/t", 1000); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(ctx, "/t", 5000); err != nil {
		t.Fatal(err)
	}
	wantT := append(bytes.Repeat([]byte("t"), 1000), make([]byte, 4000)...)
	if got := readBoth(t, r, "/t"); !bytes.Equal(got, wantT) {
		t.Fatalf("truncated inline file reads wrong (%d bytes)", len(got))
	}

	// Two writers: the hand-over is refused while the other is open, so
	// the first stores its bytes in chunks; the second changed nothing.
	a, err := w.Create(ctx, "/u")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.OpenFile(ctx, "/u", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt([]byte("from a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, r, "/u"); string(got) != "from a" {
		t.Fatalf("/u reads %q", got)
	}
	if n := storedBytes(t, r, "/u"); n != 6 {
		t.Fatalf("/u: %d bytes on storage, want 6 (the hand-over refused)", n)
	}

	// A batched write and a hole on small handles go to chunks.
	if err := w.WriteFile(ctx, "/v", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	v, err := w.OpenFile(ctx, "/v", true)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := w.NewBuffer(4)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf.B, "abcd")
	if err := w.WriteBatch(ctx, []WriteOp{{File: v, Off: 2, N: 4, Buf: buf}}); err != nil {
		t.Fatal(err)
	}
	buf.Release()
	if err := v.PunchHole(ctx, 7, 2); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, r, "/v"); string(got) != "01abcd6\x00\x009" {
		t.Fatalf("/v reads %q", got)
	}
	if n := storedBytes(t, r, "/v"); n == 0 {
		t.Fatal("/v: nothing on storage after a batched write")
	}

	// A reader's handle of an inline file cannot move it.
	h, err := r.Open(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.PunchHole(ctx, 0, 10); !errors.Is(err, ErrNotWritable) {
		t.Fatalf("hole through a read-only handle of an inline file: %v", err)
	}
	h.Close()
}

// TestInlineOff: with the service keeping no file inline, a small file's
// bytes are on storage.
func TestInlineOff(t *testing.T) {
	c := startClusterWith(t, cluster.Config{Targets: 3, ChunkSize: 64 << 10, InlineMax: -1})
	cl := connect(t, c)
	if err := cl.WriteFile(context.Background(), "/x", []byte("on storage")); err != nil {
		t.Fatal(err)
	}
	if got := readBoth(t, cl, "/x"); string(got) != "on storage" {
		t.Fatalf("/x reads %q", got)
	}
	if n := storedBytes(t, cl, "/x"); n != 10 {
		t.Fatalf("/x: %d bytes on storage, want 10", n)
	}
}

// TestCloseWithoutWrites: a handle opened for writing that writes nothing
// (or nothing since its last sync) closes without touching the file's
// length or times; one that wrote publishes both.
func TestCloseWithoutWrites(t *testing.T) {
	c := startCluster(t, t.TempDir())
	cl := connect(t, c)
	ctx := context.Background()
	for _, size := range []int{10, 100 << 10} { // inline, and in chunks
		p := fmt.Sprintf("/f%d", size)
		if err := cl.WriteFile(ctx, p, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		before, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		f, err := cl.OpenFile(ctx, p, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		after, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !after.ModTime().Equal(before.ModTime()) || after.Size() != int64(size) {
			t.Fatalf("%s: a close with no write moved mtime %v -> %v (size %d)", p, before.ModTime(), after.ModTime(), after.Size())
		}
		f, err = cl.OpenFile(ctx, p, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("x"), int64(size)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		synced, _ := cl.Stat(ctx, p)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		closed, _ := cl.Stat(ctx, p)
		if synced.Size() != int64(size)+1 || !synced.ModTime().After(before.ModTime()) || !closed.ModTime().Equal(synced.ModTime()) {
			t.Fatalf("%s: after a write and sync: size %d, mtime %v (before %v); after close %v", p, synced.Size(), synced.ModTime(), before.ModTime(), closed.ModTime())
		}
	}
}

// TestSessionEndsRide: the last close of a handle that published
// everything sends nothing; its session's end rides on the client's next
// close, or goes on its own after endDelay, or at Client.Close. The proof
// that it ended: another client's inline hand-over of the same file is
// accepted (it is refused beside an open session, which moves the bytes
// to storage).
func TestSessionEndsRide(t *testing.T) {
	c := startCluster(t, t.TempDir())
	g := c.Metrics()
	w, other := connect(t, c), connect(t, c)
	ctx := context.Background()
	closes := func() float64 {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_meta_call_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "method" && l.GetValue() == "Close" {
						return float64(m.GetHistogram().GetSampleCount())
					}
				}
			}
		}
		return 0
	}
	synced := func(p string) {
		t.Helper()
		f, err := w.Create(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("first"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		n := closes()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if closes() != n {
			t.Fatalf("%s: the close after a sync sent a command of its own", p)
		}
	}
	ended := func(p string) {
		t.Helper()
		f, err := other.OpenFile(ctx, p, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("second"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if n := storedBytes(t, other, p); n != 0 {
			t.Fatalf("%s: the hand-over beside the first writer's session was refused (%d bytes on storage): its session was still open", p, n)
		}
		if got := readBoth(t, other, p); string(got) != "second" {
			t.Fatalf("%s reads %q", p, got)
		}
	}

	// Riding on the next close.
	synced("/a")
	n := closes()
	if err := w.WriteFile(ctx, "/b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if closes() != n+1 {
		t.Fatalf("writing /b took %v closes, want 1 (carrying /a's end)", closes()-n)
	}
	ended("/a")

	// On its own, after the delay.
	synced("/c")
	time.Sleep(4 * endDelay)
	ended("/c")

	// At Client.Close.
	synced("/d")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ended("/d")
}
