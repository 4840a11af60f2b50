package local

import (
	"bytes"
	"context"
	"testing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/internal/crc32c"
)

func TestContract(t *testing.T) {
	fabrictest.CheckGoroutines(t)
	fabrictest.Run(t, fabrictest.PairOn(func(*testing.T) fabric.Transport { return NewNetwork() }, "server"))
}

func TestNameInUse(t *testing.T) {
	n := NewNetwork()
	a, err := n.Listen("a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := n.Listen("a"); err == nil {
		t.Fatal("two endpoints with one name")
	}
}

// TestWriteBatchSummed: a summed push lands every op, in peers met in any
// order, and returns each op's CRC32C in the ops' order; a range outside
// a peer's region fails the batch as WriteBatch does.
func TestWriteBatchSummed(t *testing.T) {
	n := NewNetwork()
	var peers []fabric.MR
	var bufs [][]byte
	for _, name := range []string{"a", "b"} {
		ep, err := n.Listen(name)
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		buf := make([]byte, 8192)
		mr, err := ep.RegisterMemory(buf, fabric.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		peers, bufs = append(peers, mr), append(bufs, buf)
	}
	cli, err := n.Dialer("client")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	src := fabrictest.RandBytes(3, 8192)
	ops := []fabric.Op{
		{Remote: peers[0].Remote(0, 4096), Local: src[:4096]},
		{Remote: peers[1].Remote(100, 3000), Local: src[4096:7096]},
		{Remote: peers[0].Remote(4096, 17), Local: src[7096:7113]},
	}
	ctx := context.Background()
	sums, err := cli.(fabric.SummingEndpoint).WriteBatchSummed(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if sums[i] != crc32c.Checksum(op.Local) {
			t.Errorf("op %d: sum %#x, want %#x", i, sums[i], crc32c.Checksum(op.Local))
		}
	}
	if !bytes.Equal(bufs[0][:4096], src[:4096]) || !bytes.Equal(bufs[1][100:3100], src[4096:7096]) || !bytes.Equal(bufs[0][4096:4113], src[7096:7113]) {
		t.Error("a summed push landed wrong")
	}
	bad := []fabric.Op{{Remote: fabric.RemoteBuf{Node: peers[1].Remote(0, 1).Node, Key: peers[1].Key(), Offset: 8000, Len: 400}, Local: src[:400]}}
	if _, err := cli.(fabric.SummingEndpoint).WriteBatchSummed(ctx, bad); err == nil {
		t.Error("a summed push past the region's end succeeded")
	}
}
