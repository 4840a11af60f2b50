package mgmtd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// TestDetector: through a real (one-replica) metadata group, a target whose
// heartbeats stop is taken out of its chain and the chain's version goes
// up; when it heartbeats again it rejoins as syncing, and serves once its
// predecessor reports it in sync.
func TestDetector(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := 1; n <= 3; n++ {
		err := r.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
			Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("127.0.0.1:%d", 7400+n)}, Targets: []uint32{uint32(n)}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 1}}}); err != nil {
		t.Fatal(err)
	}
	d := mgmtd.NewDetector(r, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go d.Run(ctx)
	var twoBeats atomic.Bool
	go func() {
		for ctx.Err() == nil {
			alive := []uint32{1, 3}
			if twoBeats.Load() {
				alive = append(alive, 2)
			}
			d.Heartbeat(ctx, alive, nil)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wait := func(what string, ok func(*mgmtdpb.ClusterMap) bool) *mgmtdpb.ClusterMap {
		t.Helper()
		for {
			m, err := r.ClusterMap()
			if err == nil && ok(m) {
				return m
			}
			if ctx.Err() != nil {
				t.Fatalf("never: %s (map %v)", what, m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	state := func(m *mgmtdpb.ClusterMap, id uint32) mgmtdpb.TargetState {
		for _, tg := range m.Targets {
			if tg.Id == id {
				return tg.State
			}
		}
		return 0
	}
	m := wait("target 2 offline", func(m *mgmtdpb.ClusterMap) bool { return state(m, 2) == mgmtdpb.TargetState_OFFLINE })
	if c := m.Chains[0]; len(c.Targets) != 2 || c.Version != 2 {
		t.Fatalf("chain after the lease lapsed: %v", c)
	}
	// The counter moves once the proposal returns, just after the map
	// shows the change.
	for got := testutil.ToFloat64(d.Metrics()[0]); got != 1; got = testutil.ToFloat64(d.Metrics()[0]) {
		if ctx.Err() != nil {
			t.Fatalf("leases lapsed: %v, want 1", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if state(m, 1) != mgmtdpb.TargetState_SERVING || state(m, 3) != mgmtdpb.TargetState_SERVING {
		t.Fatalf("targets that kept beating went offline: %v", m.Targets)
	}
	twoBeats.Store(true)
	m = wait("target 2 syncing", func(m *mgmtdpb.ClusterMap) bool { return state(m, 2) == mgmtdpb.TargetState_SYNCING })
	if c := m.Chains[0]; len(c.Targets) != 3 || c.Targets[2] != 2 || c.Version != 3 {
		t.Fatalf("chain after rejoin: %v", c)
	}
	if err := r.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: m.Chains[0].Id, Target: 2}}}); err != nil {
		t.Fatal(err)
	}
	m = wait("target 2 serving", func(m *mgmtdpb.ClusterMap) bool { return state(m, 2) == mgmtdpb.TargetState_SERVING })
	if r := routing.FromMap(m); len(r.Chains[1].Targets) != 3 || r.Chains[1].Version != 4 {
		t.Fatalf("routing %+v", r.Chains)
	}
}

// TestDetectorFullAndLease: a heartbeat reporting less than FullBelow free
// marks the target full in the map, and twice as much clears it; each
// heartbeat answers with the map's version after those changes.
func TestDetectorFullAndLease(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
		Node: &mgmtdpb.Node{Id: "n1", Address: "127.0.0.1:7401"}, Targets: []uint32{1}}}}); err != nil {
		t.Fatal(err)
	}
	d := mgmtd.NewDetector(r, 3*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if g := d.Grant(); g <= 0 || g >= 3*time.Second {
		t.Fatalf("grant %v: not shorter than the lease", g)
	}
	beat := func(free uint64) (bool, uint64) {
		t.Helper()
		ver, err := d.Heartbeat(ctx, []uint32{1}, []*mgmtdpb.TargetSpace{{Target: 1, TotalBytes: 1 << 40, FreeBytes: free}})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := r.ClusterMap()
		if ver != m.Version {
			t.Fatalf("heartbeat answered map version %d, the map is at %d", ver, m.Version)
		}
		return m.Targets[0].Full, ver
	}
	if full, _ := beat(mgmtd.FullBelow / 2); !full {
		t.Fatal("a target with no room is not marked full")
	}
	if full, _ := beat(mgmtd.FullBelow + 1); !full {
		t.Fatal("a full target was cleared with barely more than the threshold")
	}
	full, ver := beat(3 * mgmtd.FullBelow)
	if full {
		t.Fatal("a target with room again is still full")
	}
	if _, again := beat(3 * mgmtd.FullBelow); again != ver {
		t.Fatal("a heartbeat with nothing new changed the map")
	}
}
