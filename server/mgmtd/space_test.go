package mgmtd_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// TestDetectorTargetSpace: TargetSpace holds each target with a current
// lease as its last heartbeat reported it, leaves out reports the
// heartbeat does not vouch for and targets whose lease lapsed, and hands
// out copies.
func TestDetectorTargetSpace(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const lease = 300 * time.Millisecond
	d := mgmtd.NewDetector(r, lease, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sp := func(target uint32, total, free uint64) *mgmtdpb.TargetSpace {
		return &mgmtdpb.TargetSpace{Target: target, TotalBytes: total, FreeBytes: free}
	}
	if _, err := d.Heartbeat(ctx, []uint32{1, 2}, []*mgmtdpb.TargetSpace{sp(1, 100, 40), sp(2, 200, 50), sp(3, 1000, 1000)}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Heartbeat(ctx, []uint32{4}, []*mgmtdpb.TargetSpace{sp(4, 10, 20)}); err != nil {
		t.Fatal(err)
	}
	got := d.TargetSpace()
	if len(got) != 2 || got[1].GetTotalBytes() != 100 || got[1].GetFreeBytes() != 40 || got[2].GetTotalBytes() != 200 || got[2].GetFreeBytes() != 50 {
		t.Fatalf("target space: %v; want targets 1 (100 total, 40 free) and 2 (200, 50) only", got)
	}
	got[1].FreeBytes = 0
	if again := d.TargetSpace(); again[1].GetFreeBytes() != 40 {
		t.Fatalf("changing a returned value changed the detector's: target 1 now has %d free", again[1].GetFreeBytes())
	}
	time.Sleep(lease / 2)
	d.Heartbeat(ctx, []uint32{2}, []*mgmtdpb.TargetSpace{sp(2, 200, 30)})
	time.Sleep(lease/2 + 50*time.Millisecond)
	if got := d.TargetSpace(); len(got) != 1 || got[2].GetFreeBytes() != 30 {
		t.Fatalf("after target 1's lease lapsed: %v; want target 2 alone, 30 free", got)
	}
}
