package crc32c

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestMatchesHashCRC32: every length from 0 to 2 KiB plus large ones, at
// every alignment within 64 bytes, with any starting CRC, gives
// hash/crc32's value.
func TestMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20+512)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{3<<20 + 300, 2 << 20, 1<<20 + 1024, 1 << 20, 1<<20 - 1, 65536 + 17, 4096, 4095, 4097}
	for n := 0; n <= 2048; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, align := range []int{0, 1, 7, 8, 31, 63} {
			b := buf[align : align+n]
			init := rng.Uint32()
			if got, want := Update(init, b), crc32.Update(init, table, b); got != want {
				t.Fatalf("len %d align %d init %#x: %#x, want %#x", n, align, init, got, want)
			}
		}
	}
	if got, want := Checksum([]byte("123456789")), uint32(0xE3069283); got != want {
		t.Fatalf("check value: %#x, want %#x", got, want)
	}
}

// TestDetectsChanges: flipping any one bit of a 4 KiB block, or swapping
// two of its 16-byte pieces, changes the checksum (the fold loses nothing).
func TestDetectsChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	want := Checksum(b)
	c := bytes.Clone(b)
	for bit := 0; bit < len(b)*8; bit++ {
		c[bit/8] ^= 1 << (bit % 8)
		if Checksum(c) == want {
			t.Fatalf("bit %d flipped, same CRC", bit)
		}
		c[bit/8] ^= 1 << (bit % 8)
	}
	copy(c[0:16], b[256:272])
	copy(c[256:272], b[0:16])
	if Checksum(c) == want {
		t.Fatal("two pieces swapped, same CRC")
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte("hello"), uint8(0))
	long := make([]byte, 5000)
	for i := range long {
		long[i] = byte(i * 13)
	}
	f.Add(uint32(7), long, uint8(70))
	f.Add(uint32(0xFFFFFFFF), long[:1024], uint8(16))
	f.Fuzz(func(t *testing.T, init uint32, b []byte, split uint8) {
		if got, want := Update(init, b), crc32.Update(init, table, b); got != want {
			t.Fatalf("len %d: %#x, want %#x", len(b), got, want)
		}
		s := min(int(split)*16, len(b))
		if got, want := Update(Update(init, b[:s]), b[s:]), crc32.Update(init, table, b); got != want {
			t.Fatalf("split at %d of %d: %#x, want %#x", s, len(b), got, want)
		}
	})
}

func BenchmarkChecksum(b *testing.B) {
	for _, bs := range []struct {
		name string
		size int
	}{{"512B", 512}, {"1KiB", 1 << 10}, {"2KiB", 2 << 10}, {"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		size := bs.size
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		b.Run("size="+bs.name+"/impl=sluice", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				Checksum(buf)
			}
		})
		b.Run("size="+bs.name+"/impl=hash_crc32", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				crc32.Checksum(buf, table)
			}
		})
	}
}

// TestChecksumAllocatesNothing: a checksum of a folded length (the
// agent's and the loader's per-sample checks) takes no heap memory.
func TestChecksumAllocatesNothing(t *testing.T) {
	b := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { Checksum(b) }); n != 0 {
		t.Fatalf("Checksum of 4 KiB: %v allocations", n)
	}
}

// TestCopy: Copy leaves dst as copy does (bytes past the copy untouched)
// and returns the CRC of what it copied, at every length and alignment
// TestMatchesHashCRC32 tries.
func TestCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := make([]byte, 3<<20+512)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, len(src)+64)
	lengths := []int{3<<20 + 300, 2 << 20, 1<<20 + 1024, 1 << 20, 1<<20 - 1, 65536 + 17, 4096, 4095, 4097}
	for n := 0; n <= 2048; n += 7 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, align := range []int{0, 1, 31, 63} {
			for i := range dst {
				dst[i] = 0xAA
			}
			s, d := src[align:align+n], dst[63-align:]
			if got, want := Copy(d, s), crc32.Checksum(s, table); got != want {
				t.Fatalf("len %d align %d: %#x, want %#x", n, align, got, want)
			}
			if !bytes.Equal(d[:n], s) {
				t.Fatalf("len %d align %d: dst differs from src", n, align)
			}
			if d[n] != 0xAA || (63-align > 0 && dst[62-align] != 0xAA) {
				t.Fatalf("len %d align %d: bytes outside the copy changed", n, align)
			}
		}
	}
	if got := Copy(make([]byte, 2), []byte("123456789")); got != crc32.Checksum([]byte("12"), table) {
		t.Fatalf("short dst: %#x", got)
	}
}

func BenchmarkCopy(b *testing.B) {
	for _, bs := range []struct {
		name string
		size int
	}{{"4KiB", 4 << 10}, {"128KiB", 128 << 10}, {"1MiB", 1 << 20}, {"32MiB", 32 << 20}} {
		size := bs.size
		src, dst := make([]byte, size), make([]byte, size)
		for i := range src {
			src[i] = byte(i * 7)
		}
		b.Run("size="+bs.name+"/impl=fused", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				Copy(dst, src)
			}
		})
		b.Run("size="+bs.name+"/impl=copy_then_checksum", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
				Checksum(dst)
			}
		})
		b.Run("size="+bs.name+"/impl=copy", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
