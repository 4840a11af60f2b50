package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/chunkstore/chunkstoretest"
)

// damageCases are reads of a 64 KiB chunk whose byte damagedAt (in block
// 5) was flipped on disk: whole blocks, and ranges that start or end
// inside a block (whose CRC the node derives from the bytes around them).
// A range over a damaged block fails its check, even where it misses the
// byte itself; ranges of intact blocks read as written.
const damagedAt = 5*4096 + 100

var damageCases = []struct {
	off, n  int
	damaged bool
}{
	{0, 64 << 10, true},           // whole chunk
	{5 * 4096, 4096, true},        // the block
	{damagedAt - 10, 20, true},    // inside it
	{5*4096 + 200, 3000, true},    // in it, not over the byte
	{4*4096 + 4000, 200, true},    // ends in it
	{6*4096 - 1, 4096, true},      // starts in it
	{0, 5 * 4096, false},          // the blocks before
	{4*4096 + 1, 4000, false},     // within the block before
	{6 * 4096, 10 << 10, false},   // the blocks after
	{6*4096 + 17, 8 << 10, false}, // unaligned, after
}

// writeDamaged writes data as chunk through cl and flips damagedAt in the
// one chunk file under dir.
func writeDamaged(t *testing.T, dir string, write func() error, data []byte) {
	t.Helper()
	if err := write(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "chunks", "*"))
	if len(files) != 1 {
		t.Fatalf("chunk files: %v, want the one written", files)
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{data[damagedAt] ^ 0x01}, damagedAt); err != nil {
		t.Fatal(err)
	}
}

// TestDamageCaughtAtReader: a node serves reads from its views without
// checking the bytes, so over a wire (here a faulty network, which sums
// nothing) a block damaged on its disk must fail the reader's check of
// what it received, and reads of intact blocks are left alone.
func TestDamageCaughtAtReader(t *testing.T) {
	dir := t.TempDir()
	c := newClusterOn(t, 1, chunkstore.EngineConfig{Dir: dir})
	cl := c.client("client")
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 7}
	data := fabrictest.RandBytes(7, 64<<10)
	writeDamaged(t, dir, func() error { _, err := cl.write(ctx, chunk, 0, data, true); return err }, data)
	for _, r := range damageCases {
		got, _, err := cl.read(ctx, chunk, uint32(r.off), r.n)
		switch {
		case r.damaged && !errors.Is(err, chunkio.ErrChecksum):
			t.Errorf("[%d, +%d) over the damaged block: %v, want ErrChecksum", r.off, r.n, err)
		case !r.damaged && (err != nil || !bytes.Equal(got, data[r.off:r.off+r.n])):
			t.Errorf("[%d, +%d) of intact blocks: %d bytes, %v", r.off, r.n, len(got), err)
		}
	}
}

// TestDamageCaughtAtNodeInProcess: pushing into a reader in its own
// process (fabric/local), a node sums the bytes as it copies them
// (fabric.SummingEndpoint) and checks them itself: intact ranges come back
// Checked, so the reader passes over them once, not twice; ranges over the
// damaged block come back as ErrChecksum from the node, counted in its
// metrics, never Checked.
func TestDamageCaughtAtNodeInProcess(t *testing.T) {
	dir := t.TempDir()
	ep, cep := fabrictest.PairOn(func(*testing.T) fabric.Transport { return local.NewNetwork() }, "node-1")(t)
	r := &routing.Routing{Version: 1, Chains: map[routing.ChainID]routing.Chain{testChain: {ID: testChain, Version: 1, Targets: []routing.TargetID{1}}},
		Targets: map[routing.TargetID]routing.Target{1: {ID: 1, Node: ep.ID(), State: routing.Serving}}}
	rt := routing.NewStaticRouting(r)
	n, err := NewNode(NodeConfig{Endpoint: ep, Routing: rt, Targets: map[routing.TargetID]*chunkstore.Engine{1: chunkstoretest.Open(t, chunkstore.EngineConfig{Dir: dir})},
		Buffers: 8, BufferSize: 1 << 20, Logger: quiet, OnSynced: func(routing.ChainID, routing.TargetID, uint64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	buf := make([]byte, 256<<10)
	mr, err := cep.RegisterMemory(buf, fabric.AccessRemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	cl := chunkio.NewClient(cep, rt)
	ctx := ctxT(t, 30*time.Second)
	chunk := chunkio.ID{Inode: 7}
	data := fabrictest.RandBytes(7, 64<<10)
	writeDamaged(t, dir, func() error {
		copy(buf, data)
		_, err := cl.WriteRegistered(ctx, testChain, chunk, 0, true, mr, 0, buf[:len(data)])
		return err
	}, data)
	failures := func() float64 { return testutil.ToFloat64(n.m.target(1).crcFailures) }
	before := failures()
	reads := make([]chunkio.BatchRead, len(damageCases))
	at := 128 << 10
	for i, c := range damageCases {
		reads[i] = chunkio.BatchRead{Chain: testChain, Chunk: chunk, Offset: uint32(c.off), Dst: mr.Remote(at, c.n)}
		at += c.n
	}
	if err := cl.ReadBatch(ctx, reads); err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for i, c := range damageCases {
		rd := reads[i]
		got := buf[rd.Dst.Offset : int(rd.Dst.Offset)+max(rd.N, 0)]
		switch {
		case c.damaged && (!errors.Is(rd.Err, chunkio.ErrChecksum) || rd.Checked):
			t.Errorf("[%d, +%d) over the damaged block: %v (checked %v), want ErrChecksum from the node", c.off, c.n, rd.Err, rd.Checked)
		case !c.damaged && (rd.Err != nil || !rd.Checked || rd.N != c.n || !bytes.Equal(got, data[c.off:c.off+c.n]) || chunkio.CRC(got) != rd.CRC):
			t.Errorf("[%d, +%d) of intact blocks: %d bytes, checked %v, %v", c.off, c.n, rd.N, rd.Checked, rd.Err)
		}
		if c.damaged {
			damaged++
		}
	}
	if got := failures() - before; got != float64(damaged) {
		t.Errorf("the node counted %v checksum failures, want %d", got, damaged)
	}
}
