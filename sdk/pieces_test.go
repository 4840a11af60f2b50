package sdk

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicefs/sluice/proto/metapb"
)

// TestPieces: pieces tile the range exactly, in order, and none crosses a
// chunk boundary or a multiple of the limit within its chunk.
func TestPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, cs := range []int64{64 << 10, 1 << 20, 8 << 20} {
		f := &File{in: &metapb.Inode{Layout: &metapb.Layout{ChunkSize: uint32(cs)}}}
		for _, limit := range []int{maxReadPiece, maxPiece} {
			for range 200 {
				off, n := rng.Int64N(4*cs), 1+rng.IntN(int(3*cs))
				pos := off
				for i, pc := range f.pieces(off, n, limit) {
					if pc.off != int(pos-off) || int64(pc.index)*cs+int64(pc.chunkOff) != pos {
						t.Fatalf("chunk %d, limit %d, [%d:+%d]: piece %d %+v starts off the range", cs, limit, off, n, i, pc)
					}
					end := int64(pc.chunkOff) + int64(pc.n)
					if pc.n <= 0 || end > cs || (int64(pc.chunkOff)/int64(limit) != (end-1)/int64(limit)) {
						t.Fatalf("chunk %d, limit %d: piece %+v crosses a boundary", cs, limit, pc)
					}
					pos += int64(pc.n)
				}
				if pos != off+int64(n) {
					t.Fatalf("chunk %d, limit %d, [%d:+%d]: pieces end at %d", cs, limit, off, n, pos)
				}
			}
		}
	}
}
