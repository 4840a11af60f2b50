package storage

import (
	"testing"

	"github.com/sluicefs/sluice/fabric/fabrictest"
)

func TestCRCCombine(t *testing.T) {
	data := fabrictest.RandBytes(1, 100000)
	for _, cut := range []int{0, 1, 7, 4096, 50000, 100000 - blockSize, 99999, 100000} {
		a, b := data[:cut], data[cut:]
		if got, want := crcCombine(CRC(a), CRC(b), len(b)), CRC(data); got != want {
			t.Fatalf("cut at %d: combined %#x, want %#x", cut, got, want)
		}
	}
}
