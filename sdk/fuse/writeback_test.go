package fuse

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// TestWriteBehindVisible: bytes written behind are the file's at once to
// this mount's readers and stat, rewrites land after what they replace,
// and close leaves on storage exactly what a local file would hold.
func TestWriteBehindVisible(t *testing.T) {
	mt := mount(t, 256<<10)
	p := filepath.Join(mt.dir, "wb")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	want := fabrictest.RandBytes(31, 3<<20+100)
	for off := 0; off < len(want); off += 1 << 20 { // 1 MiB writes, the last short
		_, err := f.Write(want[off:min(off+1<<20, len(want))])
		must(t, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat before close: %v, %v; want %d bytes", fi, err, len(want))
	}
	// Rewrite a range across a chunk edge in small pieces, then read it
	// through another descriptor before anything is closed or synced.
	re := fabrictest.RandBytes(32, 600<<10)
	for off := 0; off < len(re); off += 4 << 10 {
		_, err := f.WriteAt(re[off:off+4<<10], 100<<10+int64(off))
		must(t, err)
	}
	copy(want[100<<10:], re)
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back before close: %d bytes, %v; differs: %v", len(got), err, !bytes.Equal(got, want))
	}
	// Last writer wins on a range rewritten many times over.
	for i := byte(0); i < 20; i++ {
		_, err := f.WriteAt(bytes.Repeat([]byte{i}, 300<<10), 1<<20)
		must(t, err)
	}
	copy(want[1<<20:], bytes.Repeat([]byte{19}, 300<<10))
	must(t, f.Close())

	sf, err := mt.cl.Open(context.Background(), "/wb")
	must(t, err)
	defer sf.Close()
	if sf.Size() != int64(len(want)) {
		t.Fatalf("length after close: %d, want %d", sf.Size(), len(want))
	}
	got = make([]byte, len(want))
	if _, err := sf.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the SDK after close: %v; differs: %v", err, !bytes.Equal(got, want))
	}
}

// TestWriteBehindFailureReported: a write that fails on its way to
// storage (the disks are full) is reported by a later write, fsync or
// close: never lost.
func TestWriteBehindFailureReported(t *testing.T) {
	mnt := mountOnSmallDisks(t, "1m")
	f, err := os.Create(filepath.Join(mnt, "big"))
	must(t, err)
	block := fabrictest.RandBytes(33, 1<<20)
	var errs []error
	for i := 0; i < 3; i++ { // 3 MiB onto 1 MiB disks, taken at once
		_, err := f.Write(block)
		errs = append(errs, err)
	}
	errs = append(errs, f.Sync(), f.Close())
	for _, err := range errs {
		if errnoOf(err) == syscall.ENOSPC {
			return
		}
	}
	t.Fatalf("writes, fsync and close: %v; want ENOSPC from one of them", errs)
}

// TestBudget: write-behind takes no more bytes than its budget; a taker
// waits until others give back.
func TestBudget(t *testing.T) {
	b := newBudget(4 << 20)
	b.acquire(3 << 20)
	got := make(chan struct{})
	go func() {
		b.acquire(2 << 20) // 1 MiB left: waits
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("took 2 MiB with 1 MiB of the budget left")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(3 << 20)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the budget came back")
	}
	b.release(2 << 20)
	b.acquire(64 << 20) // more than all of it: takes all of it
	if b.left != 0 {
		t.Fatalf("left %d after taking everything", b.left)
	}
}

// TestWindowFetchedBeforeWriteLands: a readahead window the kernel's
// readahead had fetched while bytes written behind were on their way
// holds the old bytes; once they land the window is stale, and the next
// read gets the new bytes. (The kernel sends such a read concurrently
// with the writer's next write; this replays that order in one
// goroutine, with no mount.)
func TestWindowFetchedBeforeWriteLands(t *testing.T) {
	ctx := context.Background()
	cl, in := clusterFile(t, cluster.Config{Targets: 3, ChunkSize: 64 << 10}, fabrictest.RandBytes(34, 256<<10))

	fs := NewFS(cl, Config{WriteBehind: 8 << 20})
	_, of, _, err := fs.acquire(ctx, in.Ino(), true)
	must(t, err)
	defer fs.drop(of)
	p := make([]byte, 4<<10)
	for off := int64(0); off < 4*4<<10; off += 4 << 10 { // sequential: windows from now on
		_, err := of.read(ctx, p, off)
		must(t, err)
	}
	fresh := bytes.Repeat([]byte{0xab}, 4<<10)
	_, err = of.write(fresh, 200<<10) // taken, not yet sent
	must(t, err)
	// The kernel's reads that settled before the write come on to the
	// readahead now (sequential again after the write's reset) and fetch
	// the window, without the bytes still in the mount.
	for off := int64(4 * 4 << 10); off < 8*4<<10; off += 4 << 10 {
		_, err := of.ra.read(ctx, p, off)
		must(t, err)
	}
	if fs.stats.Windows.Load() == 0 {
		t.Fatal("no window fetched: the test missed what it replays")
	}
	got := make([]byte, 4<<10)
	_, err = of.read(ctx, got, 200<<10)
	must(t, err)
	if !bytes.Equal(got, fresh) {
		t.Fatalf("read after the write: the window's old bytes (first %#x), want %#x", got[0], fresh[0])
	}
}

// clusterFile starts a cluster with cfg (its Dir a temporary one), writes
// data to a file there through a client, and returns the client and the
// file, for tests that drive the mount's FS without mounting it.
func clusterFile(t *testing.T, cfg cluster.Config, data []byte) (*sdk.Client, *sdk.FileInfo) {
	t.Helper()
	ctx := context.Background()
	cfg.Dir = t.TempDir()
	c, err := cluster.Start(ctx, cfg)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	cl, err := sdk.Connect(ctx, sdk.Config{Cluster: c.Addr, Token: c.Token})
	must(t, err)
	t.Cleanup(func() { cl.Close() })
	must(t, cl.WriteFile(ctx, "/f", data))
	in, err := cl.Stat(ctx, "/f")
	must(t, err)
	return cl, in
}

// read reads p at off into p, as a caller that wants the bytes in place.
func (of *openFile) read(ctx context.Context, p []byte, off int64) (int, error) {
	r, err := of.reply(ctx, p, off)
	if err != nil {
		return 0, err
	}
	return r.into(p), nil
}

// read reads p at off into p through the readahead alone: io.EOF past
// the file's end.
func (ra *readahead) read(ctx context.Context, p []byte, off int64) (int, error) {
	r, err := ra.reply(ctx, p, off)
	return r.into(p), err
}

// into copies the reply into p and lets it go; its length.
func (r *reply) into(p []byte) int {
	n := r.copyTo(p)
	r.Done()
	return n
}
