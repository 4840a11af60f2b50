package chunkstore

import (
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
