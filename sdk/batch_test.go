package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// TestWriteBatch: many ops over many files in one call — partial chunks,
// ranges across chunk boundaries, adjacent ranges (merged into one update),
// overlapping ranges (the later op wins) — read back exactly as a local
// model of the same writes says, and each file's length covers its ops.
func TestWriteBatch(t *testing.T) {
	cl := testClient(t) // 64 KiB chunks
	ctx := context.Background()
	const files, fileSize = 12, 300 << 10
	buf := testBuffer(t, cl, 4<<20)
	copy(buf.B, fabrictest.RandBytes(11, len(buf.B)))

	rng := rand.New(rand.NewPCG(1, 2))
	model := make([][]byte, files)
	ends := make([]int, files)
	handles := make([]*File, files)
	var ops []WriteOp
	for i := range files {
		model[i] = make([]byte, fileSize)
		var err error
		if handles[i], err = cl.Create(ctx, fmt.Sprintf("/w%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(fi int, off, n, bufOff int) {
		ops = append(ops, WriteOp{File: handles[fi], Off: int64(off), N: n, Buf: buf, BufOff: bufOff})
		copy(model[fi][off:off+n], buf.B[bufOff:bufOff+n])
		ends[fi] = max(ends[fi], off+n)
	}
	for range 400 {
		n := 1 + rng.IntN(20_000)
		write(rng.IntN(files), rng.IntN(fileSize-n), n, rng.IntN(len(buf.B)-n))
	}
	// Adjacent in the file and the buffer (one update), across a chunk
	// boundary, then an overlap the later op must win.
	write(0, 60_000, 3000, 1000)
	write(0, 63_000, 4000, 4000)
	write(0, 61_000, 500, 2_000_000)
	write(1, 0, 0, 0) // empty: nothing happens
	if err := cl.WriteBatch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	for i, f := range handles {
		if f.Size() != int64(ends[i]) {
			t.Fatalf("file %d: handle says %d bytes, want %d", i, f.Size(), ends[i])
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		r, err := cl.Open(ctx, fmt.Sprintf("/w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if r.Size() != int64(ends[i]) {
			t.Fatalf("file %d: %d bytes after close, want %d", i, r.Size(), ends[i])
		}
		got := make([]byte, ends[i])
		if n, _ := r.ReadAt(got, 0); n != ends[i] || !bytes.Equal(got, model[i][:ends[i]]) {
			t.Fatalf("file %d: read back %d bytes, equal=%v", i, n, bytes.Equal(got, model[i][:ends[i]]))
		}
		r.Close()
	}
}

// TestWriteBatchErrors: a bad op fails with a clear error naming it, and
// the good ops of the same batch are still written.
func TestWriteBatchErrors(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	buf := testBuffer(t, cl, 64<<10)
	copy(buf.B, fabrictest.RandBytes(3, len(buf.B)))
	w, err := cl.Create(ctx, "/good")
	if err != nil {
		t.Fatal(err)
	}
	ro, err := cl.Open(ctx, "/good")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		op   WriteOp
		want error
	}{
		{"read-only handle", WriteOp{File: ro, N: 10, Buf: buf}, ErrNotWritable},
		{"past the buffer", WriteOp{File: w, N: 100, Buf: buf, BufOff: len(buf.B) - 50}, ErrOutOfRange},
		{"negative buffer offset", WriteOp{File: w, N: 100, Buf: buf, BufOff: -1}, ErrOutOfRange},
		{"huge length", WriteOp{File: w, N: 1 << 62, Buf: buf, BufOff: 1}, ErrOutOfRange},
		{"past the largest file", WriteOp{File: w, Off: 64 << 10 << 32, N: 10, Buf: buf}, ErrTooLarge}, // 64 KiB chunks, 32-bit indexes
		{"no file", WriteOp{N: 1, Buf: buf}, nil},
		{"negative offset", WriteOp{File: w, Off: -5, N: 1, Buf: buf}, nil},
	}
	for _, tc := range cases {
		good := WriteOp{File: w, Off: 0, N: 1000, Buf: buf, BufOff: 0}
		err := cl.WriteBatch(ctx, []WriteOp{good, tc.op})
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if !bytes.Contains([]byte(err.Error()), []byte("op 1")) {
			t.Fatalf("%s: error does not name the op: %v", tc.name, err)
		}
	}
	got := make([]byte, 1000)
	w.Close()
	r, _ := cl.Open(ctx, "/good")
	if n, _ := r.ReadAt(got, 0); n != 1000 || !bytes.Equal(got, buf.B[:1000]) {
		t.Fatalf("the good op beside a bad one: read %d bytes, equal=%v", n, bytes.Equal(got, buf.B[:1000]))
	}
}

// TestReadOps: per-op results — bytes, short reads at the end, holes as
// zeros, CRCs of what lies in the buffer — and a bad op fails alone.
func TestReadOps(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	data := fabrictest.RandBytes(4, 200<<10)
	f, err := cl.Create(ctx, "/r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[:50<<10], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[150<<10:], 150<<10); err != nil { // a hole in between
		t.Fatal(err)
	}
	f.Close()
	copy(data[50<<10:150<<10], make([]byte, 100<<10))
	r, _ := cl.Open(ctx, "/r")
	buf := testBuffer(t, cl, 1<<20)
	for i := range buf.B {
		buf.B[i] = 0xee
	}
	ops := []ReadOp{
		{File: r, Off: 1000, N: 100_000, Buf: buf, BufOff: 0},                     // data, hole, across chunks
		{File: r, Off: int64(len(data)) - 10, N: 4096, Buf: buf, BufOff: 200_000}, // short at the end
		{File: r, Off: 0, N: 10, Buf: buf, BufOff: len(buf.B) - 5},                // outside the buffer
		{File: r, Off: int64(len(data)) + 5, N: 10, Buf: buf, BufOff: 300_000},    // past the end
		// One piece each, whose CRC is the piece's: data; a chunk never
		// written; data then the zeros past its chunk's end.
		{File: r, Off: 4096, N: 4096, Buf: buf, BufOff: 400_000},
		{File: r, Off: 70 << 10, N: 1000, Buf: buf, BufOff: 410_000},
		{File: r, Off: 40 << 10, N: 20 << 10, Buf: buf, BufOff: 420_000},
	}
	res := cl.readOps(ctx, ops, true)
	wantN := []int{100_000, 10, 0, 0, 4096, 1000, 20 << 10}
	for i, op := range ops {
		if i == 2 {
			if !errors.Is(res[i].Err, ErrOutOfRange) {
				t.Fatalf("op outside its buffer: %v", res[i].Err)
			}
			continue
		}
		if res[i].Err != nil || res[i].N != wantN[i] {
			t.Fatalf("op %d: %d bytes, %v", i, res[i].N, res[i].Err)
		}
		got := buf.B[op.BufOff : op.BufOff+res[i].N]
		from := min(op.Off, int64(len(data)))
		if !bytes.Equal(got, data[from:from+int64(res[i].N)]) || res[i].CRC != chunkio.CRC(got) {
			t.Fatalf("op %d: bytes or CRC wrong", i)
		}
	}
}

// testClient connects to a new in-process cluster (64 KiB chunks); both
// close when the test ends.
func testClient(t *testing.T) *Client {
	c := startCluster(t, t.TempDir())
	t.Cleanup(func() { c.Close() })
	cl := connect(t, c)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// testBuffer registers n bytes until the test ends.
func testBuffer(t *testing.T, cl *Client, n int) *Buffer {
	buf, err := cl.NewBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Release() })
	return buf
}

// TestReadBatchErrors: ReadBatch and the agent's per-op read (readOps) are
// one implementation and refuse the same ops with the same errors
// (ErrOutOfRange for a range outside its buffer); ReadBatch names the op
// and reads nothing when any op is refused, readOps fails the op alone.
func TestReadBatchErrors(t *testing.T) {
	cl := testClient(t)
	ctx := context.Background()
	data := fabrictest.RandBytes(5, 10_000)
	if err := cl.WriteFile(ctx, "/f", data); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := testBuffer(t, cl, 64<<10)
	cases := []struct {
		name string
		op   ReadOp
		want error
	}{
		{"past the buffer", ReadOp{File: r, N: 100, Buf: buf, BufOff: len(buf.B) - 50}, ErrOutOfRange},
		{"negative buffer offset", ReadOp{File: r, N: 100, Buf: buf, BufOff: -1}, ErrOutOfRange},
		{"huge length", ReadOp{File: r, N: 1 << 62, Buf: buf, BufOff: 1}, ErrOutOfRange},
		{"no file", ReadOp{N: 1, Buf: buf}, nil},
		{"no buffer", ReadOp{File: r, N: 1}, nil},
		{"negative offset", ReadOp{File: r, Off: -5, N: 1, Buf: buf}, nil},
	}
	for _, tc := range cases {
		clear(buf.B)
		good := ReadOp{File: r, N: 1000, Buf: buf, BufOff: 1000}
		err := cl.ReadBatch(ctx, []ReadOp{good, tc.op})
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), "op 1") {
			t.Fatalf("%s: ReadBatch: %v, want %v naming op 1", tc.name, err, tc.want)
		}
		if !bytes.Equal(buf.B[1000:2000], make([]byte, 1000)) {
			t.Fatalf("%s: ReadBatch read the good op of a refused batch", tc.name)
		}
		res := cl.readOps(ctx, []ReadOp{good, tc.op}, true)
		if res[0].Err != nil || res[0].N != 1000 || !bytes.Equal(buf.B[1000:2000], data[:1000]) {
			t.Fatalf("%s: readOps failed the good op: %v", tc.name, res[0].Err)
		}
		if res[1].Err == nil || (tc.want != nil && !errors.Is(res[1].Err, tc.want)) {
			t.Fatalf("%s: readOps: %v, want %v", tc.name, res[1].Err, tc.want)
		}
	}
	// The same good ops read the same bytes both ways.
	ops := []ReadOp{{File: r, Off: 10, N: 5000, Buf: buf}, {File: r, Off: 9000, N: 4000, Buf: buf, BufOff: 8000}}
	if err := cl.ReadBatch(ctx, ops); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.B[:5000], data[10:5010]) || !bytes.Equal(buf.B[8000:9000], data[9000:]) {
		t.Fatal("ReadBatch read wrong bytes")
	}
}

// TestBufferAsksForHugePages: a private buffer's mapping carries the
// kernel's MADV_HUGEPAGE flag ("hg" in /proc/self/smaps), so whoever walks
// it gets transparent huge pages where the kernel has them.
func TestBufferAsksForHugePages(t *testing.T) {
	cl := testClient(t)
	buf := testBuffer(t, cl, 8<<20)
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps here: %v", err)
	}
	start := uint64(uintptr(unsafe.Pointer(&buf.B[0])))
	var inside bool
	for _, line := range strings.Split(string(smaps), "\n") {
		var lo, hi uint64
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			inside = lo <= start && start < hi
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			if !slices.Contains(strings.Fields(line), "hg") {
				t.Fatalf("buffer's mapping without MADV_HUGEPAGE: %s", line)
			}
			return
		}
	}
	t.Fatal("buffer's mapping not found in /proc/self/smaps")
}
