package mgmtd

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

func TestPlacementBalanced(t *testing.T) {
	var targets []*mgmtdpb.Target
	for n := 0; n < 6; n++ {
		for k := 0; k < 2; k++ {
			targets = append(targets, &mgmtdpb.Target{Id: uint32(n*10 + k), Node: fmt.Sprint("node", n)})
		}
	}
	node := func(id uint32) string { return fmt.Sprint("node", id/10) }
	chains, err := Place(targets, nil, 3, 24)
	if err != nil {
		t.Fatal(err)
	}
	nodeLoad, targetLoad, pairs := map[string]int{}, map[uint32]int{}, map[[2]string]int{}
	for _, c := range chains {
		seen := map[string]bool{}
		for i, id := range c {
			if seen[node(id)] {
				t.Fatalf("chain %v puts two replicas on %s", c, node(id))
			}
			seen[node(id)] = true
			nodeLoad[node(id)]++
			targetLoad[id]++
			for _, o := range c[:i] {
				pairs[pairKey(node(id), node(o))]++
			}
		}
	}
	for n, l := range nodeLoad {
		if l != 12 {
			t.Fatalf("node %s holds %d replicas, want 12", n, l)
		}
	}
	for _, tg := range targets {
		if targetLoad[tg.Id] != 6 {
			t.Fatalf("target %d holds %d replicas, want 6", tg.Id, targetLoad[tg.Id])
		}
	}
	lo, hi := 1<<30, 0
	for _, c := range pairs {
		lo, hi = min(lo, c), max(hi, c)
	}
	if len(pairs) != 15 || hi-lo > 2 {
		t.Fatalf("node pairs share chains unevenly: %d pairs, %d..%d", len(pairs), lo, hi)
	}
	if _, err := Place(targets, nil, 7, 1); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("7 replicas on 6 nodes: %v", err)
	}
}

func openMap(t *testing.T) *ClusterMap {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return NewClusterMap(db)
}

func apply(t *testing.T, c *ClusterMap, cmd *mgmtdpb.Command) {
	t.Helper()
	if err := c.Apply(cmd); err != nil {
		t.Fatal(err)
	}
}

func TestTransitions(t *testing.T) {
	c := openMap(t)
	for n := 1; n <= 3; n++ {
		apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
			Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("10.0.0.%d:7410", n)}, Targets: []uint32{uint32(n)}}}})
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 2}}})
	m, _ := c.Map()
	if len(m.Chains) != 2 || len(m.Chains[0].Targets) != 3 || m.Chains[0].Version != 1 {
		t.Fatalf("chains %v", m.Chains)
	}
	versions := func() []uint64 {
		m, _ := c.Map()
		return []uint64{m.Chains[0].Version, m.Chains[1].Version}
	}
	state := func(id uint32) mgmtdpb.TargetState {
		m, _ := c.Map()
		return target(m, id).State
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetOffline{TargetOffline: 2}})
	m, _ = c.Map()
	if state(2) != mgmtdpb.TargetState_OFFLINE || slices.Contains(m.Chains[0].Targets, 2) || !slices.Equal(versions(), []uint64{2, 2}) {
		t.Fatalf("after offline: %v", m)
	}
	r := routing.FromMap(m)
	if r.Targets[2].State != routing.Offline || len(r.Chains[1].Targets) != 2 || r.Targets[1].Node != "10.0.0.1:7410" {
		t.Fatalf("routing %+v", r)
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 2}})
	m, _ = c.Map()
	if state(2) != mgmtdpb.TargetState_SYNCING || m.Chains[0].Targets[2] != 2 || !slices.Equal(versions(), []uint64{3, 3}) {
		t.Fatalf("after rejoin: %v", m)
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: m.Chains[0].Id, Target: 2}}})
	if state(2) != mgmtdpb.TargetState_SYNCING {
		t.Fatal("serving after syncing one of two chains")
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: m.Chains[1].Id, Target: 2}}})
	if state(2) != mgmtdpb.TargetState_SERVING || !slices.Equal(versions(), []uint64{4, 4}) {
		t.Fatalf("after sync: %v %v", state(2), versions())
	}
	for name, cmd := range map[string]*mgmtdpb.Command{
		"rejoin a serving target": {Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 1}},
		"offline an unknown one":  {Op: &mgmtdpb.Command_TargetOffline{TargetOffline: 99}},
		"table again":             {Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: 1, Chains: 1}}},
		"too many replicas":       {Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 2, Replicas: 4, Chains: 1}}},
		"someone else's target":   {Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{Node: &mgmtdpb.Node{Id: "n9", Address: "x:1"}, Targets: []uint32{1}}}},
		"synced while serving":    {Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: 1, Target: 1}}},
		"node without an address": {Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{Node: &mgmtdpb.Node{Id: "n8"}}}},
	} {
		before, _ := c.Map()
		if err := c.Apply(cmd); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%s: %v", name, err)
		}
		if after, _ := c.Map(); after.Version != before.Version {
			t.Errorf("%s: a refused command changed the map", name)
		}
	}
}

// fourByThree is the operator's cluster: 4 nodes of one target, 4 chains
// of 3.
func fourByThree(t *testing.T) *ClusterMap {
	c := openMap(t)
	for n := 1; n <= 4; n++ {
		apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
			Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("10.0.0.%d:7410", n)}, Targets: []uint32{uint32(n)}}}})
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: 4}}})
	return c
}

// recover plays the storage nodes' part until every target serves: each
// syncing target whose predecessor serves in a chain is reported synced
// there. It fails if that stops making progress (the cluster is stuck).
func recover(t *testing.T, c *ClusterMap) {
	t.Helper()
	for round := 0; ; round++ {
		m, _ := c.Map()
		r := routing.FromMap(m)
		progress, done := false, true
		for _, ch := range r.Chains {
			for i := 1; i < len(ch.Targets); i++ {
				if ch.States[i] != routing.Syncing {
					continue
				}
				done = false
				if ch.States[i-1] == routing.Serving {
					apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{
						Chain: uint32(ch.ID), Target: uint32(ch.Targets[i]), ChainVer: ch.Version}}})
					progress = true
					break
				}
			}
			for i, st := range ch.States {
				if st != routing.Serving {
					done = false
					if i == 0 {
						t.Fatalf("chain %d's head %d is %v", ch.ID, ch.Targets[0], st)
					}
				}
			}
		}
		if done {
			return
		}
		if !progress || round > 100 {
			t.Fatalf("recovery stuck: %v", m.Chains)
		}
	}
}

// TestOverlappingFaultsRecover: three of four nodes go down one after the
// other (every replica of some chains); each chain keeps its last serving
// replica, offline, and serves nothing; once everyone is back every chain
// recovers by itself, whatever the order of return. (Chains used to lose
// their last replica, and targets syncing in one chain could not feed
// another: every target ended syncing.)
func TestOverlappingFaultsRecover(t *testing.T) {
	for _, back := range [][]uint32{{1, 2, 3}, {3, 2, 1}, {2, 3, 1}} {
		c := fourByThree(t)
		for _, id := range []uint32{1, 2, 3} {
			apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetOffline{TargetOffline: id}})
		}
		m, _ := c.Map()
		for _, ch := range routing.FromMap(m).Chains {
			if len(ch.Targets) == 0 {
				t.Fatalf("chain %d lost every replica", ch.ID)
			}
			if len(ch.Serving()) == 0 && ch.State(ch.Targets[0]) != routing.Offline {
				t.Fatalf("chain %d: no serving replica and none kept: %v %v", ch.ID, ch.Targets, ch.States)
			}
		}
		for _, id := range back {
			apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: id}})
		}
		recover(t, c)
		m, _ = c.Map()
		for _, tg := range m.Targets {
			if tg.State != mgmtdpb.TargetState_SERVING {
				t.Fatalf("order %v: target %d is %v", back, tg.Id, tg.State)
			}
		}
		for _, ch := range m.Chains {
			if len(ch.Targets) != 3 {
				t.Fatalf("order %v: chain %d has %v", back, ch.Id, ch.Targets)
			}
		}
	}
}

// TestRestartGoesBackToSync: a target that registers again while its
// lease still runs (a fast restart) leaves its chains' serving replicas for
// their ends, syncing; where it is the only serving replica it keeps
// serving.
func TestRestartGoesBackToSync(t *testing.T) {
	c := fourByThree(t)
	register := func(n uint32) {
		apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
			Node: &mgmtdpb.Node{Id: fmt.Sprint("n", n), Address: fmt.Sprintf("10.0.0.%d:7410", n)}, Targets: []uint32{n}}}})
	}
	register(1)
	m, _ := c.Map()
	r := routing.FromMap(m)
	if r.Targets[1].State != routing.Syncing {
		t.Fatalf("restarted target is %v", r.Targets[1].State)
	}
	for _, ch := range r.Chains {
		if st := ch.State(1); st != 0 && (st != routing.Syncing || ch.Tail() != 1) {
			t.Fatalf("chain %d: %v %v", ch.ID, ch.Targets, ch.States)
		}
	}
	// A stale report (from before the chain changed) is refused.
	var ch *mgmtdpb.Chain
	for _, x := range m.Chains {
		if slices.Contains(x.Targets, 1) {
			ch = x
		}
	}
	stale := &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: ch.Id, Target: 1, ChainVer: ch.Version - 1}}}
	if err := c.Apply(stale); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("stale resync report: %v", err)
	}
	recover(t, c)
	// The only serving replica of a chain keeps serving when it restarts.
	for _, id := range []uint32{2, 3} {
		apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetOffline{TargetOffline: id}})
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 2}})
	register(1)
	m, _ = c.Map()
	for _, ch := range routing.FromMap(m).Chains {
		if len(ch.Serving()) == 0 && ch.State(ch.Targets[0]) != routing.Offline {
			t.Fatalf("chain %d has nobody serving after a restart: %v %v", ch.ID, ch.Targets, ch.States)
		}
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 3}})
	recover(t, c)
}
