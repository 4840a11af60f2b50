package mgmtd_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// follower is a group whose replica may be told it does not lead.
type follower struct {
	*meta.Replica
	leads atomic.Bool
}

func (f *follower) IsLeader() bool { return f.leads.Load() && f.Replica.IsLeader() }

// TestPlannerRunsOnTheLeader: through a real (one-replica) metadata group,
// the planner does nothing while its replica does not lead; leading, it
// moves replicas to a new node until the rebalance is done (the test
// reports each move's new target in sync, as its predecessor would), then
// turns the rebalance off; it stops when its context ends.
func TestPlannerRunsOnTheLeader(t *testing.T) {
	r := soloReplica(t, &metapb.Layout{ChunkSize: 1 << 20, Stripe: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	propose := func(cmd *mgmtdpb.Command) {
		t.Helper()
		if err := r.ProposeCluster(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	register := func(n int) {
		propose(&mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
			Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("127.0.0.1:%d", 7400+n)}, Targets: []uint32{uint32(n)}}}})
	}
	for n := 1; n <= 4; n++ {
		register(n)
	}
	propose(&mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 4, Placement: mgmtd.PlacementBalanced}}})
	register(5)
	propose(&mgmtdpb.Command{Op: &mgmtdpb.Command_SetRebalance{SetRebalance: &mgmtdpb.SetRebalance{On: true}}})

	g := &follower{Replica: r}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		mgmtd.NewPlanner(g, mgmtd.PlannerConfig{MaxMoves: 1, Interval: 20 * time.Millisecond, Logger: quiet}).Run(pctx)
	}()
	time.Sleep(200 * time.Millisecond)
	if m, _ := r.ClusterMap(); m.MovesDone != 0 || !m.Rebalance || mgmtd.Progress(m).InFlight != nil {
		t.Fatalf("a planner not leading moved something: %v", mgmtd.Progress(m))
	}
	g.leads.Store(true)
	for {
		m, err := r.ClusterMap()
		if err != nil {
			t.Fatal(err)
		}
		if !m.Rebalance {
			if m.MovesDone != 2 {
				t.Fatalf("rebalance over after %d moves, want 2", m.MovesDone)
			}
			break
		}
		p := mgmtd.Progress(m)
		if len(p.InFlight) > 1 {
			t.Fatalf("%d moves in flight, throttle 1", len(p.InFlight))
		}
		for _, mv := range p.InFlight {
			for _, c := range m.Chains {
				if c.Id == mv.Chain {
					r.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: c.Id, Target: mv.To, ChainVer: c.Version}}})
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the rebalance never ended: %v", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the planner did not stop with its context")
	}
}
