package fuse

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

// The FUSE benchmarks measure the mount against the SDK on the same file
// of the same cluster in the same run, alternating one pass of each, and
// report FUSE ÷ SDK (x_sdk, above 1 when the mount is faster) beside both
// rates. The file is SLUICE_FUSE_BENCH_MIB MiB (1024 by default); run with
// -benchtime 3x or so: one iteration is a whole pass over it.

func benchSize(b *testing.B) int64 {
	mib := 1024
	if s := os.Getenv("SLUICE_FUSE_BENCH_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil || mib <= 0 {
			b.Fatalf("SLUICE_FUSE_BENCH_MIB=%q", s)
		}
	}
	return int64(mib) << 20
}

// versus runs fuse and sdk b.N times each, alternating; b's timer covers
// fuse only. It reports both rates for bytes per pass, and the ratio.
func versus(b *testing.B, bytes int64, unit string, fuse, sdk func()) {
	var fuseT, sdkT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		fuse()
		t1 := time.Now()
		b.StopTimer()
		sdk()
		sdkT += time.Since(t1)
		b.StartTimer()
		fuseT += t1.Sub(t0)
	}
	b.StopTimer()
	n := float64(b.N) * float64(bytes)
	if unit == "MB/s" {
		n /= 1e6
	}
	b.ReportMetric(n/fuseT.Seconds(), "fuse_"+unit)
	b.ReportMetric(n/sdkT.Seconds(), "sdk_"+unit)
	b.ReportMetric(sdkT.Seconds()/fuseT.Seconds(), "x_sdk")
}

// benchFile writes size random bytes to name through the SDK.
func benchFile(b *testing.B, mt *mounted, name string, size int64) {
	f, err := mt.cl.Create(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	block := fabrictest.RandBytes(21, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		block[0]++
		if _, err := f.WriteAt(block[:min(int64(len(block)), size-off)], off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSequentialRead: the whole file in 1 MiB reads, cold, through a
// fresh open in the mount (the kernel's pages of the file dropped first:
// it keeps them at an open of a file nobody changed) and through the
// SDK's ReadAt.
func BenchmarkSequentialRead(b *testing.B) {
	mt := mount(b, 1<<20)
	size := benchSize(b)
	benchFile(b, mt, "/seq", size)
	buf := make([]byte, 1<<20)
	versus(b, size, "MB/s", func() {
		f, err := os.Open(filepath.Join(mt.dir, "seq"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		// Cold: the kernel would keep the pages of a file nobody changed.
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}, func() {
		f, err := mt.cl.Open(context.Background(), "/seq")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSequentialWrite: a new file of the size in 1 MiB writes, then
// fsync and close, as `dd bs=1M conv=fsync` does, through the mount; the
// SDK writes the same bytes its fastest way (16 MiB WriteAt calls, whose
// chunks go to their chains at once) and closes; local_MB/s is the mount's
// pattern on the local disk.
func BenchmarkSequentialWrite(b *testing.B) {
	mt := mount(b, 1<<20)
	size := benchSize(b)
	block := fabrictest.RandBytes(22, 1<<20)
	big := fabrictest.RandBytes(23, 16<<20)
	ctx := context.Background()
	local := filepath.Join(b.TempDir(), "w-local")
	var localT time.Duration
	versus(b, size, "MB/s", func() {
		writeFile(b, filepath.Join(mt.dir, "w-fuse"), block, size)
	}, func() {
		mt.cl.Remove(ctx, "/w-sdk")
		f, err := mt.cl.Create(ctx, "/w-sdk")
		if err != nil {
			b.Fatal(err)
		}
		for off := int64(0); off < size; off += int64(len(big)) {
			if _, err := f.WriteAt(big[:min(int64(len(big)), size-off)], off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		writeFile(b, local, block, size)
		localT += time.Since(t0)
	})
	b.ReportMetric(float64(b.N)*float64(size)/1e6/localT.Seconds(), "local_MB/s")
}

// writeFile writes a new file of size bytes at p in len(block) writes,
// then fsyncs and closes it, as dd conv=fsync does.
func writeFile(b *testing.B, p string, block []byte, size int64) {
	os.Remove(p)
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < size; off += int64(len(block)) {
		if _, err := f.Write(block); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRandomRead4K: 4 KiB reads at random aligned offsets of the
// file, one at a time, through the mount with O_DIRECT (so that every read
// reaches Sluice, not the kernel's page cache) and through the SDK's
// ReadAt. One iteration is 1000 reads of each. The mount's block cache
// (cache.go) keeps the blocks the reader comes back to, fetched in the
// background; the SDK reads every one from storage. Readers at once are
// measured by benchmarks/randread.py with fio, in processes of their own
// (here they would share the mount's Go scheduler).
func BenchmarkRandomRead4K(b *testing.B) {
	mt := mount(b, 1<<20)
	size := benchSize(b)
	benchFile(b, mt, "/rand", size)
	const reads = 1000
	f, err := os.OpenFile(filepath.Join(mt.dir, "rand"), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sf, err := mt.cl.Open(context.Background(), "/rand")
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	raw := make([]byte, 8<<10)
	buf := raw[4096-int(uintptr(unsafe.Pointer(&raw[0]))%4096):][:4096] // O_DIRECT wants it aligned
	rng := rand.New(rand.NewPCG(7, 8))
	offset := func() int64 { return rng.Int64N(size/4096) * 4096 }
	versus(b, reads, "reads/s", func() {
		for i := 0; i < reads; i++ {
			if n, err := f.ReadAt(buf, offset()); err != nil || n != 4096 {
				b.Fatalf("read: %d %v", n, err)
			}
		}
	}, func() {
		for i := 0; i < reads; i++ {
			if n, err := sf.ReadAt(buf, offset()); err != nil || n != 4096 {
				b.Fatalf("sdk read: %d %v", n, err)
			}
		}
	})
}
