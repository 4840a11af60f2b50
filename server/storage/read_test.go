package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// TestDamageCaughtAtReader: a node serves reads from its views without
// checking the bytes, so a block damaged on its disk must fail the
// reader's check of what it received, for ranges of whole blocks and for
// ranges that start or end inside a block (whose CRC the node derives from
// the bytes around them), and leave reads of intact blocks alone.
func TestDamageCaughtAtReader(t *testing.T) {
	dir := t.TempDir()
	c := newClusterOn(t, 1, chunkstore.EngineConfig{Dir: dir})
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 7}
	data := fabrictest.RandBytes(7, 64<<10)
	if _, err := cl.write(ctx, chunk, 0, data, true); err != nil {
		t.Fatal(err)
	}
	const at = 5*4096 + 100 // in block 5
	files, _ := filepath.Glob(filepath.Join(dir, "chunks", "*"))
	if len(files) != 1 {
		t.Fatalf("chunk files: %v, want the one written", files)
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{data[at] ^ 0x01}, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, r := range []struct {
		off, n  int
		damaged bool
	}{
		{0, 64 << 10, true},           // whole chunk
		{5 * 4096, 4096, true},        // the block
		{at - 10, 20, true},           // inside it
		{5*4096 + 200, 3000, true},    // in it, not over the byte
		{4*4096 + 4000, 200, true},    // ends in it
		{6*4096 - 1, 4096, true},      // starts in it
		{0, 5 * 4096, false},          // the blocks before
		{4*4096 + 1, 4000, false},     // within the block before
		{6 * 4096, 10 << 10, false},   // the blocks after
		{6*4096 + 17, 8 << 10, false}, // unaligned, after
	} {
		got, _, err := cl.read(ctx, chunk, uint32(r.off), r.n)
		switch {
		case r.damaged && !errors.Is(err, chunkio.ErrChecksum):
			t.Errorf("[%d, +%d) over the damaged block: %v, want ErrChecksum", r.off, r.n, err)
		case !r.damaged && (err != nil || !bytes.Equal(got, data[r.off:r.off+r.n])):
			t.Errorf("[%d, +%d) of intact blocks: %d bytes, %v", r.off, r.n, len(got), err)
		}
	}
}
