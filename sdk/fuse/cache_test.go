package fuse

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
)

// aligned is n bytes at a 4 KiB-aligned address, as O_DIRECT wants.
func aligned(n int) []byte {
	raw := make([]byte, n+4096)
	return raw[4096-int(uintptr(unsafe.Pointer(&raw[0]))%4096):][:n]
}

// spread is blocks of cache blocks apart from each other, farther than a
// sequential reader's slack (readahead.go), so that readers hopping among
// them are random readers: a sparse file, block i of content at
// i*spread.
const spread = 2*slack + cacheBlock

// spreadFile writes data, whole cache blocks, to name through the SDK,
// block i at i*spread.
func spreadFile(t *testing.T, mt *mounted, name string, data []byte) {
	t.Helper()
	f, err := mt.cl.Create(context.Background(), name)
	must(t, err)
	for i := 0; i < len(data)/cacheBlock; i++ {
		_, err = f.WriteAt(data[i*cacheBlock:(i+1)*cacheBlock], int64(i)*spread)
		must(t, err)
	}
	must(t, f.Close())
}

// page is the file offset of page (4 KiB) n of block i of a spread file,
// and where its bytes are in the data written.
func page(i, n int) (off int64, at int) {
	return int64(i)*spread + int64(n)*4096, i*cacheBlock + n*4096
}

// readPages reads the pages at offs, 4 KiB each, from f and checks them
// against the data at ats.
func readPages(t *testing.T, f *os.File, offs []int64, ats []int, data []byte) {
	t.Helper()
	buf := aligned(4096)
	for k, off := range offs {
		if n, err := f.ReadAt(buf, off); err != nil || n != 4096 {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
		if !bytes.Equal(buf, data[ats[k]:ats[k]+4096]) {
			t.Fatalf("read at %d: wrong bytes", off)
		}
	}
}

// TestBlockCache: O_DIRECT random readers that come back to blocks are
// served from the mount's cache (a block fetched once, on its second
// miss), writes through the mount are seen at once, and a file changed by
// another client is seen after it is opened again.
func TestBlockCache(t *testing.T) {
	mt := mount(t, 1<<20)
	data := fabrictest.RandBytes(31, 8*cacheBlock)
	spreadFile(t, mt, "/c", data)
	p := filepath.Join(mt.dir, "c")

	rng := rand.New(rand.NewPCG(1, 2))
	offs, ats := make([]int64, 200), make([]int, 200) // 200 pages in 8 blocks
	for k := range offs {
		offs[k], ats[k] = page(rng.IntN(8), rng.IntN(cacheBlock/4096))
	}
	keep, err := os.Open(p) // held throughout: the mount keeps the file open
	must(t, err)
	defer keep.Close()
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_DIRECT, 0)
	must(t, err)
	defer func() { f.Close() }()
	for range 3 {
		readPages(t, f, offs, ats, data)
	}
	st := mt.m.FS.Stats()
	fetches, hits := st.CacheFetches.Load(), st.CacheHits.Load()
	if fetches < 1 || fetches > 8 || hits < 500 {
		t.Fatalf("3 passes of 200 reads over 8 blocks: %d blocks fetched, %d reads from the cache", fetches, hits)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(mt.m.FS.Collectors()...)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	if got["sluice_mount_cache_fetches_total"] != float64(fetches) || got["sluice_mount_cache_hits_total"] != float64(hits) ||
		got["sluice_mount_cache_bytes"] != float64(fetches*cacheBlock) || got["sluice_mount_cache_limit_bytes"] != 1<<30 {
		t.Fatalf("the mount's metrics %v, after %d fetches and %d hits", got, fetches, hits)
	}

	// A write through the mount, over a cached block: the next read sees it.
	patch := aligned(4096)
	copy(patch, bytes.Repeat([]byte{0x5a}, 4096))
	if _, err := f.WriteAt(patch, offs[0]); err != nil {
		t.Fatal(err)
	}
	copy(data[ats[0]:], patch)
	readPages(t, f, offs, ats, data)
	readPages(t, f, offs, ats, data)
	must(t, f.Close())

	// Another client rewrites the file: an open after that sees it, though
	// the mount had it open all along.
	fresh := fabrictest.RandBytes(32, len(data))
	sf, err := mt.cl.OpenFile(context.Background(), "/c", true)
	must(t, err)
	for i := range 8 {
		off, at := page(i, 0)
		_, err = sf.WriteAt(fresh[at:at+cacheBlock], off)
		must(t, err)
	}
	must(t, sf.Close())
	f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECT, 0)
	must(t, err)
	readPages(t, f, offs, ats, fresh)
	readPages(t, f, offs, ats, fresh)
}

// TestBlockCacheEviction: a cache of four blocks under concurrent readers
// of sixteen keeps evicting, and every read still returns the file's bytes.
func TestBlockCacheEviction(t *testing.T) {
	mt := mount(t, 1<<20)
	small := mountOnWith(t, mt.c, Config{Cache: 4 * cacheBlock})
	data := fabrictest.RandBytes(33, 16*cacheBlock)
	spreadFile(t, mt, "/e", data)
	var wg sync.WaitGroup
	for j := range 4 {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(small.dir, "e"), os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			rng := rand.New(rand.NewPCG(uint64(j), 9))
			buf := aligned(4096)
			for range 1500 {
				off, at := page(rng.IntN(16), rng.IntN(cacheBlock/4096))
				if n, err := f.ReadAt(buf, off); err != nil || n != 4096 || !bytes.Equal(buf, data[at:at+4096]) {
					t.Errorf("read at %d: %d, %v", off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := small.m.FS.Stats()
	if fetches, hits := st.CacheFetches.Load(), st.CacheHits.Load(); fetches <= 4 || hits == 0 {
		t.Fatalf("16 blocks read at random through a 4-block cache: %d fetches, %d hits", fetches, hits)
	}
}

// TestNoBlockCache: with the cache off, random reads go to storage.
func TestNoBlockCache(t *testing.T) {
	mt := mount(t, 1<<20)
	off := mountOnWith(t, mt.c, Config{Cache: -1})
	data := fabrictest.RandBytes(34, 2*cacheBlock)
	spreadFile(t, mt, "/n", data)
	f, err := os.OpenFile(filepath.Join(off.dir, "n"), os.O_RDONLY|syscall.O_DIRECT, 0)
	must(t, err)
	defer f.Close()
	var offs []int64
	var ats []int
	for _, n := range []int{0, 1, 2, 3} {
		off, at := page(n%2, n)
		offs, ats = append(offs, off), append(ats, at)
	}
	for range 4 {
		readPages(t, f, offs, ats, data)
	}
	if st := off.m.FS.Stats(); st.CacheFetches.Load() != 0 || st.CacheHits.Load() != 0 {
		t.Fatalf("no cache, yet %d fetches and %d hits", st.CacheFetches.Load(), st.CacheHits.Load())
	}
}

// TestReplyHoldsWindow: a reply to the kernel points into a readahead
// window rather than copying it, so the window stays pinned until the
// reply is written: closing the file's readahead waits for it, and the
// reply's bytes are the file's all along.
func TestReplyHoldsWindow(t *testing.T) {
	ctx := context.Background()
	data := fabrictest.RandBytes(35, 4<<20)
	cl, in := clusterFile(t, cluster.Config{Targets: 1}, data)
	fs := NewFS(cl, Config{})
	_, of, _, err := fs.acquire(ctx, in.Ino(), false)
	must(t, err)
	defer fs.drop(of)
	p := make([]byte, 64<<10)
	var r *reply
	for off := int64(0); off < 8*64<<10; off += 64 << 10 { // sequential: windows from the fourth read
		if r != nil {
			r.Done()
		}
		if r, err = of.reply(ctx, p, off); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.wins) == 0 || &r.pieces[0][0] == &p[0] {
		t.Fatalf("the eighth sequential read was copied, not served from a window (%d windows pinned)", len(r.wins))
	}
	closed := make(chan struct{})
	go func() {
		of.ra.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("the readahead closed while a reply pointed into its window")
	case <-time.After(100 * time.Millisecond):
	}
	got := make([]byte, len(p))
	if n := r.copyTo(got); n != len(p) || !bytes.Equal(got, data[7*64<<10:8*64<<10]) {
		t.Fatalf("the reply held %d bytes, equal=%v", n, bytes.Equal(got, data[7*64<<10:8*64<<10]))
	}
	r.Done()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the readahead did not close once the reply was done")
	}
	of.ra = newReadahead(cl, of.f, fs.cfg.Readahead, nil, &fs.stats) // for drop's close
}

// TestKeepPages: a file read twice through the mount with nobody changing
// it in between is read from storage once (the kernel keeps its pages at
// the second open); a change by another client, in place and of the same
// length, is seen at the next open, and so is a write through the mount.
func TestKeepPages(t *testing.T) {
	mt := mount(t, 1<<20)
	data := fabrictest.RandBytes(36, 3<<20)
	sdkWrite := func(b []byte) {
		f, err := mt.cl.OpenFile(context.Background(), "/k", true)
		if errors.Is(err, sdk.ErrNotExist) {
			f, err = mt.cl.Create(context.Background(), "/k")
		}
		must(t, err)
		_, err = f.WriteAt(b, 0)
		must(t, err)
		must(t, f.Close())
	}
	sdkWrite(data)
	p := filepath.Join(mt.dir, "k")
	readBytes := func() float64 {
		snap, err := mt.cl.Metrics().Snapshot()
		must(t, err)
		return snap["sluice_client_read_bytes_total"]
	}
	readAs := func(want []byte, what string) {
		t.Helper()
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v, equal=%v", what, len(got), err, bytes.Equal(got, want))
		}
	}
	in, err := mt.cl.Stat(context.Background(), "/k")
	must(t, err)
	// settled waits for the mount to close the file after a close(2) (the
	// kernel's release comes after it, and the SDK file's close, which
	// sets the file's times once more, after that): until the mount has
	// it open no more and its times hold still for 200 ms.
	settled := func() {
		t.Helper()
		var last time.Time
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			st, err := mt.cl.Stat(context.Background(), "/k")
			must(t, err)
			if mt.m.FS.opened(in.Ino()) == nil && st.ChangeTime().Equal(last) {
				return
			}
			last = st.ChangeTime()
			if time.Now().After(deadline) {
				t.Fatal("the file's close through the mount did not settle in 10 s")
			}
		}
	}
	readAs(data, "first read")
	before := readBytes()
	readAs(data, "second read")
	if after := readBytes(); after != before {
		t.Fatalf("the second read of an unchanged file read %v bytes from storage", after-before)
	}

	changed := bytes.Clone(data)
	copy(changed[1<<20:], bytes.Repeat([]byte{0x77}, 4096))
	sdkWrite(changed) // in place: same length
	readAs(changed, "read after another client's write")

	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("through the mount"), 100)
	must(t, err)
	must(t, f.Close())
	copy(changed[100:], "through the mount")
	settled()
	readAs(changed, "read after a write through the mount")
	before = readBytes()
	readAs(changed, "read again")
	if after := readBytes(); after != before {
		t.Fatalf("a read of a file unchanged since the last open read %v bytes from storage", after-before)
	}
}
