package fuse

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// TestSDKInterop: what is written through the mount reads back the same
// through the SDK once closed, and the other way round.
func TestSDKInterop(t *testing.T) {
	mt := mount(t, 64<<10)
	ctx := context.Background()
	data := fabrictest.RandBytes(11, 1<<20+12345)
	must(t, os.WriteFile(filepath.Join(mt.dir, "from-fuse"), data, 0o644))
	if got := sdkRead(t, mt, "/from-fuse"); !bytes.Equal(got, data) {
		t.Fatalf("the SDK reads %d bytes of %d, equal=%v", len(got), len(data), bytes.Equal(got, data))
	}

	f, err := mt.cl.Create(ctx, "/from-sdk")
	must(t, err)
	_, err = f.WriteAt(data, 0)
	must(t, err)
	must(t, f.Close())
	if got, err := os.ReadFile(filepath.Join(mt.dir, "from-sdk")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the mount reads %d bytes of %d (%v), equal=%v", len(got), len(data), err, bytes.Equal(got, data))
	}
	// A change through the SDK shows in the mount once the attribute cache
	// (1s) has expired and the file is opened again.
	must(t, mt.cl.Truncate(ctx, "/from-sdk", 100))
	must(t, mt.cl.Rename(ctx, "/from-sdk", "/renamed"))
	if got, err := os.ReadFile(filepath.Join(mt.dir, "renamed")); err != nil || !bytes.Equal(got, data[:100]) {
		t.Fatalf("after the SDK truncated and renamed: %d bytes, %v", len(got), err)
	}
}

// TestDD copies 256 MiB into the mount and out again with dd; the
// checksums must match.
func TestDD(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB through dd: not in -short")
	}
	mt := mount(t, 1<<20)
	tmp := t.TempDir()
	src, dst, in := filepath.Join(tmp, "src"), filepath.Join(tmp, "dst"), filepath.Join(mt.dir, "big")
	f, err := os.Create(src)
	must(t, err)
	block := fabrictest.RandBytes(12, 1<<20)
	for i := 0; i < 256; i++ {
		block[i] ^= 0xff // every MiB differs
		_, err := f.Write(block)
		must(t, err)
	}
	must(t, f.Close())
	for _, args := range [][]string{
		{"if=" + src, "of=" + in, "bs=1M", "conv=fsync"},
		{"if=" + in, "of=" + dst, "bs=1M"},
	} {
		if out, err := exec.Command("dd", args...).CombinedOutput(); err != nil {
			t.Fatalf("dd %v: %v\n%s", args, err, out)
		}
	}
	sum := func(p string) [32]byte {
		f, err := os.Open(p)
		must(t, err)
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		must(t, err)
		if n != 256<<20 {
			t.Fatalf("%s: %d bytes", p, n)
		}
		return [32]byte(h.Sum(nil))
	}
	if a, b := sum(src), sum(dst); a != b {
		t.Fatalf("checksums differ: in %x, out %x", a, b)
	}
	if in, err := mt.cl.Stat(context.Background(), "/big"); err != nil || in.Size() != 256<<20 {
		t.Fatalf("the SDK's length: %v %v", in, err)
	}
}

// TestReadahead: a sequential reader is served from readahead windows (one
// batched read each), and a write through the mount is seen by the next
// read, not hidden by a window fetched before it.
func TestReadahead(t *testing.T) {
	mt := mount(t, 1<<20)
	data := fabrictest.RandBytes(15, 40<<20+777)
	f, err := mt.cl.Create(context.Background(), "/seq")
	must(t, err)
	_, err = f.WriteAt(data, 0)
	must(t, err)
	must(t, f.Close())
	got, err := os.ReadFile(filepath.Join(mt.dir, "seq"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("sequential read: %d bytes, %v, equal=%v", len(got), err, bytes.Equal(got, data))
	}
	st := mt.m.FS.Stats()
	if w, n := st.Windows.Load(), st.ReadaheadBytes.Load(); w < 5 || n < 20<<20 {
		t.Fatalf("readahead served %d bytes from %d windows of a 40 MiB sequential read", n, w)
	}
	rw, err := os.OpenFile(filepath.Join(mt.dir, "seq"), os.O_RDWR|syscall.O_DIRECT, 0)
	must(t, err)
	defer rw.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 8<<20; off += int64(len(buf)) { // windows now hold the first 16 MiB
		if _, err := rw.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	patch := bytes.Repeat([]byte{0xab}, 1<<20)
	if _, err := rw.WriteAt(patch, 9<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.ReadAt(buf, 9<<20); err != nil || !bytes.Equal(buf, patch) {
		t.Fatalf("a read after a write returned the bytes from before it")
	}
}
