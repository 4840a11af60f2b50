package mgmtd

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/storage"
)

func TestPlacementBalanced(t *testing.T) {
	var targets []*mgmtdpb.Target
	for n := 0; n < 6; n++ {
		for k := 0; k < 2; k++ {
			targets = append(targets, &mgmtdpb.Target{Id: uint32(n*10 + k), Node: fmt.Sprint("node", n)})
		}
	}
	node := func(id uint32) string { return fmt.Sprint("node", id/10) }
	chains, err := Place(targets, 3, 24)
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
	if _, err := Place(targets, 7, 1); !errors.Is(err, ErrBadCommand) {
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
	r := Routing(m)
	if r.Targets[2].State != storage.Offline || len(r.Chains[1].Targets) != 2 || r.Targets[1].Node != "10.0.0.1:7410" {
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
