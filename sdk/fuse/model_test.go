package fuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRandomOperations is fsx without mmap: thousands of random writes,
// truncates, reads, fsyncs and reopens of one file through the mount,
// each checked against the file's content kept in memory. Any mismatch
// fails with the log of operations that led to it (the seed replays it:
// SLUICE_FSX_SEED).
func TestRandomOperations(t *testing.T) {
	mt := mount(t, 64<<10)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_FSX_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	ops := 2000
	if testing.Short() {
		ops = 500
	}
	rng := rand.New(rand.NewPCG(seed, 6))
	const maxSize = 400 << 10 // seven 64 KiB chunks
	p := filepath.Join(mt.dir, "fsx")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { f.Close() }()
	var model []byte
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		start := max(0, len(log)-100)
		t.Fatalf("seed %d, after %d operations: %s\nthe last %d operations:\n%s", seed, len(log), fmt.Sprintf(format, args...),
			len(log)-start, strings.Join(log[start:], "\n"))
	}
	check := func(off, n int) {
		t.Helper()
		got := make([]byte, n)
		k, err := f.ReadAt(got, int64(off))
		if err != nil && err != io.EOF {
			fail("read %d+%d: %v", off, n, err)
		}
		want := []byte{}
		if off < len(model) {
			want = model[off:min(off+n, len(model))]
		}
		if k != len(want) || !bytes.Equal(got[:k], want) {
			i := 0
			for i < min(k, len(want)) && got[i] == want[i] {
				i++
			}
			fail("read %d+%d: got %d bytes, want %d; first difference at %d (%s)", off, n, k, len(want), off+i, sdkSees(mt, want, off))
		}
	}
	for i := 0; i < ops; i++ {
		switch r := rng.IntN(100); {
		case r < 40: // write
			off := rng.IntN(maxSize)
			n := 1 + rng.IntN(min(maxSize-off, 70000))
			b := make([]byte, n)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			log = append(log, fmt.Sprintf("%d write %d+%d", i, off, n))
			if _, err := f.WriteAt(b, int64(off)); err != nil {
				fail("write: %v", err)
			}
			if end := off + n; end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], b)
		case r < 55: // truncate, mostly down
			size := rng.IntN(maxSize)
			if rng.IntN(3) == 0 {
				size = len(model) + rng.IntN(70000)
			}
			log = append(log, fmt.Sprintf("%d truncate %d (from %d)", i, size, len(model)))
			if err := f.Truncate(int64(size)); err != nil {
				fail("truncate: %v", err)
			}
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		case r < 85: // read
			off := rng.IntN(maxSize)
			n := 1 + rng.IntN(100000)
			log = append(log, fmt.Sprintf("%d read %d+%d", i, off, n))
			check(off, n)
		case r < 90: // a sequential pass, which the readahead windows serve
			step := 4096 << rng.IntN(6)
			log = append(log, fmt.Sprintf("%d sequential read in %d-byte pieces", i, step))
			for off := 0; off < len(model)+step; off += step {
				check(off, step)
			}
		case r < 95: // fsync, then the length as stat and the SDK see it
			log = append(log, fmt.Sprintf("%d fsync", i))
			if err := f.Sync(); err != nil {
				fail("fsync: %v", err)
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(model)) {
				fail("fstat: %v %v, want %d bytes", fi, err, len(model))
			}
			if in, err := mt.cl.Stat(context.Background(), "/fsx"); err != nil || in.Size() != int64(len(model)) {
				fail("length seen by the SDK after fsync: %v %v, want %d", in, err, len(model))
			}
		default: // close and reopen
			log = append(log, fmt.Sprintf("%d reopen", i))
			if err := f.Close(); err != nil {
				fail("close: %v", err)
			}
			if f, err = os.OpenFile(p, os.O_RDWR, 0); err != nil {
				fail("reopen: %v", err)
			}
		}
	}
	log = append(log, "final check of the whole file")
	check(0, maxSize+100000)
	if err := f.Close(); err != nil {
		fail("close: %v", err)
	}
	if got := sdkRead(t, mt, "/fsx"); !bytes.Equal(got, model) {
		fail("the SDK reads %d bytes, want %d, equal=%v", len(got), len(model), bytes.Equal(got, model))
	}
}

// sdkSees says whether the SDK, reading /fsx on its own, finds want at
// off: whether a mismatch is the mount's or the cluster's.
func sdkSees(mt *mounted, want []byte, off int) string {
	f, err := mt.cl.Open(context.Background(), "/fsx")
	if err != nil {
		return fmt.Sprintf("the SDK cannot open it: %v", err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	n, err := f.ReadAt(got, int64(off))
	if err != nil && err != io.EOF {
		return fmt.Sprintf("the SDK cannot read it: %v", err)
	}
	if n == len(want) && bytes.Equal(got, want) {
		return "the SDK reads the right bytes there"
	}
	return fmt.Sprintf("the SDK reads %d bytes there, equal=%v", n, bytes.Equal(got[:n], want))
}

// sdkRead reads a whole file through the SDK.
func sdkRead(t testing.TB, mt *mounted, p string) []byte {
	t.Helper()
	f, err := mt.cl.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) || (err != nil && err != io.EOF) {
		t.Fatalf("sdk read %s: %d of %d bytes: %v", p, n, len(b), err)
	}
	return b
}
