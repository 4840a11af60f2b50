package chunkstore

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

func TestCRCCombine(t *testing.T) {
	data := fabrictest.RandBytes(1, 100000)
	for _, cut := range []int{0, 1, 7, 4096, 50000, 100000 - blockSize, 99999, 100000} {
		a, b := data[:cut], data[cut:]
		if got, want := crcCombine(chunkio.CRC(a), chunkio.CRC(b), len(b)), chunkio.CRC(data); got != want {
			t.Fatalf("cut at %d: combined %#x, want %#x", cut, got, want)
		}
	}
}

func TestRangeCRC(t *testing.T) {
	data := fabrictest.RandBytes(2, 10*blockSize+123)
	v := newVersion(1, data)
	if v.Crc != chunkio.CRC(data) {
		t.Fatal("version CRC differs from the content's")
	}
	for _, r := range [][2]int{{0, len(data)}, {blockSize, 3 * blockSize}, {2 * blockSize, len(data) - 2*blockSize}, {5, 100}, {blockSize, 17}, {0, 0}} {
		got := RangeCRC(v, uint32(r[0]), data[r[0]:r[0]+r[1]])
		if want := chunkio.CRC(data[r[0] : r[0]+r[1]]); got != want {
			t.Fatalf("range [%d:+%d]: %#x, want %#x", r[0], r[1], got, want)
		}
	}
}

func TestShiftCRC(t *testing.T) {
	for _, n := range []uint32{0, 1, 7, 100, blockSize - 1, blockSize} {
		for _, crc := range []uint32{0, 1, 0x80000000, 0xdeadbeef, 0xffffffff} {
			shifted := shiftCRC(crc, n)
			if want := crcCombineSlow(crc, 0, int(n)); shifted != want {
				t.Fatalf("shift %#x by %d: %#x, want %#x", crc, n, shifted, want)
			}
			if back := unshiftCRC(shifted, n); back != crc {
				t.Fatalf("unshift of %#x shifted by %d: %#x", crc, n, back)
			}
		}
	}
}

// TestGFMul checks the carry-less multiplication against the product taken
// bit by bit, a term of a at a time.
func TestGFMul(t *testing.T) {
	slow := func(a, b uint32) uint32 {
		var p uint32
		for bit := uint32(1) << 31; bit != 0; bit >>= 1 { // x^0 first
			if a&bit != 0 {
				p ^= b
			}
			b = timesX(b)
		}
		return p
	}
	rng := rand.New(rand.NewPCG(1, 2))
	edge := []uint32{0, 1, 1 << 31, 0xffffffff, castagnoli, 0x80000001, 0x7fffffff}
	for i := range 20000 {
		a, b := rng.Uint32(), rng.Uint32()
		if i < len(edge)*len(edge) {
			a, b = edge[i/len(edge)], edge[i%len(edge)]
		}
		if got, want := gfMul(a, b), slow(a, b); got != want {
			t.Fatalf("gfMul(%#x, %#x) = %#x, want %#x", a, b, got, want)
		}
	}
}

func BenchmarkShiftCRC(b *testing.B) {
	crc := uint32(0xdeadbeef)
	for i := 0; b.Loop(); i++ {
		crc = shiftCRC(crc, uint32(i)%blockSize)
	}
	sink = crc
}

var sink uint32

// spanRanges are ranges of a version of length size: aligned and not,
// within one block, across several, ending the chunk, empty.
func spanRanges(size int) [][2]int {
	var out [][2]int
	points := []int{0, 1, 100, blockSize - 1, blockSize, blockSize + 1, 2*blockSize - 5, 3 * blockSize, 5*blockSize + 17, size - blockSize - 1, size - 123, size - 1, size}
	for _, a := range points {
		for _, b := range points {
			if a <= b {
				out = append(out, [2]int{a, b})
			}
		}
	}
	return out
}

func TestSpanCRC(t *testing.T) {
	data := fabrictest.RandBytes(5, 10*blockSize+123)
	v := newVersion(1, data)
	for _, r := range spanRanges(len(data)) {
		got, err := spanCRC(v, data, uint32(r[0]), uint32(r[1]))
		if err != nil {
			t.Fatalf("[%d, %d): %v", r[0], r[1], err)
		}
		if want := chunkio.CRC(data[r[0]:r[1]]); got != want {
			t.Fatalf("[%d, %d): %#x, want %#x", r[0], r[1], got, want)
		}
	}
	if _, err := spanCRC(v, data, 0, uint32(len(data))+1); !errors.Is(err, chunkio.ErrChecksum) {
		t.Fatalf("a range past the version's end: %v, want ErrChecksum", err)
	}
}

// TestSpanCRCCatchesDamage: a reader checking the bytes it received
// against spanCRC notices a damaged byte anywhere in a block its range
// touches (inside the range, or in the block's bytes outside it, which the
// derivation read), and only there.
func TestSpanCRCCatchesDamage(t *testing.T) {
	data := fabrictest.RandBytes(6, 10*blockSize+123)
	v := newVersion(1, data)
	for _, at := range []int{0, blockSize - 1, blockSize + 10, 5*blockSize + 16, len(data) - 1} {
		damaged := append([]byte(nil), data...)
		damaged[at] ^= 0x5a
		for _, r := range spanRanges(len(data)) {
			if r[0] == r[1] {
				continue
			}
			crc, err := spanCRC(v, damaged, uint32(r[0]), uint32(r[1]))
			if err != nil {
				t.Fatal(err)
			}
			touched := at/blockSize >= r[0]/blockSize && at/blockSize <= (r[1]-1)/blockSize
			if caught := crc != chunkio.CRC(damaged[r[0]:r[1]]); caught != touched {
				t.Fatalf("byte %d damaged, range [%d, %d): caught %v, want %v", at, r[0], r[1], caught, touched)
			}
		}
	}
}
