package mgmtd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// moveCluster is a map of nodes s1..sN with one target each (target i on
// node si, rack racks[i-1] when given) and table 1 of chains chains with
// replicas replicas.
func moveCluster(t *testing.T, nodes, replicas, chains int, racks ...string) *ClusterMap {
	t.Helper()
	c := openMap(t)
	for i := 1; i <= nodes; i++ {
		n := &mgmtdpb.Node{Id: fmt.Sprint("s", i), Address: fmt.Sprint("a", i)}
		if len(racks) > 0 {
			n.Rack = racks[i-1]
		}
		apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{Node: n, Targets: []uint32{uint32(i)}}}})
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{Table: 1, Replicas: uint32(replicas), Chains: uint32(chains), Placement: PlacementBalanced}}})
	return c
}

func addNode(t *testing.T, c *ClusterMap, id uint32, rack string) {
	t.Helper()
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: &mgmtdpb.RegisterNode{
		Node: &mgmtdpb.Node{Id: fmt.Sprint("s", id), Address: fmt.Sprint("a", id), Rack: rack}, Targets: []uint32{id}}}})
}

func mapOf(t *testing.T, c *ClusterMap) *mgmtdpb.ClusterMap {
	t.Helper()
	m, err := c.Map()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func move(ch, from, to uint32) *mgmtdpb.Command {
	return &mgmtdpb.Command{Op: &mgmtdpb.Command_MoveReplica{MoveReplica: &mgmtdpb.Move{Chain: ch, From: from, To: to}}}
}

func synced(t *testing.T, c *ClusterMap, ch, target uint32) error {
	t.Helper()
	return c.Apply(&mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: &mgmtdpb.TargetSynced{Chain: ch, Target: target, ChainVer: chain(mapOf(t, c), ch).Version}}})
}

func offline(id uint32) *mgmtdpb.Command {
	return &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetOffline{TargetOffline: id}}
}

// members is chain ch as "target:state" pairs, head first.
func members(t *testing.T, c *ClusterMap, ch uint32) string {
	t.Helper()
	rc := routing.ChainFromMap(chain(mapOf(t, c), ch))
	s := ""
	for _, id := range rc.Targets {
		s += fmt.Sprintf("%d:%s ", id, rc.State(id))
	}
	return s
}

func TestMoveStartsAndCompletes(t *testing.T) {
	c := moveCluster(t, 3, 3, 1)
	addNode(t, c, 4, "")
	m := mapOf(t, c)
	v0, mv0 := chain(m, 1).Version, m.Version
	apply(t, c, move(1, 2, 4))
	m = mapOf(t, c)
	ch := chain(m, 1)
	if got := members(t, c, 1); got != "1:serving 2:serving 3:serving 4:syncing " {
		t.Fatalf("after the move starts: %s", got)
	}
	if ch.Version <= v0 || m.Version <= mv0 || ch.Move.GetTo() != 4 || !slices.Contains(target(m, 4).Chains, 1) || target(m, 4).State != mgmtdpb.TargetState_SYNCING {
		t.Fatalf("move not recorded: chain v%d (was %d), move %v, target 4 %v", ch.Version, v0, ch.Move, target(m, 4))
	}
	if err := c.Apply(move(1, 3, 4)); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a second move on a moving chain: %v", err)
	}
	if err := synced(t, c, 1, 4); err != nil {
		t.Fatal(err)
	}
	m = mapOf(t, c)
	if got := members(t, c, 1); got != "1:serving 3:serving 4:serving " {
		t.Fatalf("after the move completes: %s", got)
	}
	if chain(m, 1).Move != nil || slices.Contains(target(m, 2).Chains, 1) || m.MovesDone != 1 || target(m, 4).State != mgmtdpb.TargetState_SERVING {
		t.Fatalf("move not finished: %v, target 2 chains %v, done %d", chain(m, 1).Move, target(m, 2).Chains, m.MovesDone)
	}
}

func TestMoveRefusals(t *testing.T) {
	// One node per rack, but s4 shares s1's.
	c := moveCluster(t, 3, 3, 1, "r1", "r2", "r3")
	addNode(t, c, 4, "r1")
	addNode(t, c, 5, "r5")
	for _, tc := range []struct {
		name string
		cmd  *mgmtdpb.Command
	}{
		{"same rack as a replica", move(1, 2, 4)},
		{"target already in the chain", move(1, 2, 3)},
		{"from not in the chain", move(1, 5, 4)},
		{"no chain", move(9, 1, 5)},
		{"no target", move(1, 1, 99)},
	} {
		if err := c.Apply(tc.cmd); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%s: %v, want refused", tc.name, err)
		}
	}
	// Target 4 may replace target 1, in its own rack.
	apply(t, c, move(1, 1, 4))
	if got := members(t, c, 1); got != "1:serving 2:serving 3:serving 4:syncing " {
		t.Fatal(got)
	}
}

func TestMoveCancelledWhenNewTargetDies(t *testing.T) {
	c := moveCluster(t, 3, 3, 1)
	addNode(t, c, 4, "")
	apply(t, c, move(1, 2, 4))
	v := chain(mapOf(t, c), 1).Version
	apply(t, c, offline(4))
	m := mapOf(t, c)
	if got := members(t, c, 1); got != "1:serving 2:serving 3:serving " {
		t.Fatalf("after the new target died: %s", got)
	}
	if chain(m, 1).Move != nil || len(target(m, 4).Chains) != 0 || m.MovesCancelled != 1 || m.MovesDone != 0 || chain(m, 1).Version <= v {
		t.Fatalf("move not cancelled: %v, target 4 chains %v, cancelled %d", chain(m, 1).Move, target(m, 4).Chains, m.MovesCancelled)
	}
	// Back again, it has no chain to rejoin; a new move may start.
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 4}})
	apply(t, c, move(1, 2, 4))
}

func TestMoveGoesOnWhenLeavingTargetDies(t *testing.T) {
	c := moveCluster(t, 3, 3, 1)
	addNode(t, c, 4, "")
	apply(t, c, move(1, 2, 4))
	apply(t, c, offline(2))
	if got := members(t, c, 1); got != "1:serving 3:serving 4:syncing " {
		t.Fatalf("after the leaving target died: %s", got)
	}
	if err := synced(t, c, 1, 4); err != nil {
		t.Fatal(err)
	}
	m := mapOf(t, c)
	if got := members(t, c, 1); got != "1:serving 3:serving 4:serving " || len(target(m, 2).Chains) != 0 || m.MovesDone != 1 {
		t.Fatalf("after the move completed: %s, target 2 chains %v", got, target(m, 2).Chains)
	}
	// The dead target comes back to no chain: it does not rejoin.
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 2}})
	if got := members(t, c, 1); got != "1:serving 3:serving 4:serving " {
		t.Fatalf("after the replaced target came back: %s", got)
	}
}

func TestMoveKeepsTheLastServingReplica(t *testing.T) {
	c := moveCluster(t, 3, 3, 1)
	addNode(t, c, 4, "")
	apply(t, c, offline(2))
	apply(t, c, offline(3))
	apply(t, c, offline(1)) // kept, offline: the chain's last serving replica
	if err := c.Apply(move(1, 1, 4)); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a move with nothing to copy from: %v", err)
	}
}

// TestOldCommandsReplay: a log of the commands that existed before moves
// applies as it did, and leaves no trace of moves.
func TestOldCommandsReplay(t *testing.T) {
	c := moveCluster(t, 4, 3, 4)
	apply(t, c, offline(2))
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 2}})
	m := mapOf(t, c)
	for _, cid := range target(m, 2).Chains {
		if err := synced(t, c, cid, 2); err != nil {
			t.Fatal(err)
		}
	}
	m = mapOf(t, c)
	if m.MovesDone != 0 || m.Rebalance || inFlight(m) != 0 {
		t.Fatalf("moves out of old commands: %v", m)
	}
	for _, ch := range m.Chains {
		if got := members(t, c, ch.Id); len(routing.ChainFromMap(ch).Serving()) != 3 {
			t.Fatalf("chain %d: %s", ch.Id, got)
		}
	}
	// The same log applied again, to a fresh map, gives the same map.
	c2 := moveCluster(t, 4, 3, 4)
	apply(t, c2, offline(2))
	apply(t, c2, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 2}})
	for _, cid := range target(m, 2).Chains {
		if err := synced(t, c2, cid, 2); err != nil {
			t.Fatal(err)
		}
	}
	if m2 := mapOf(t, c2); fmt.Sprint(m2) != fmt.Sprint(m) {
		t.Fatalf("replay differs:\n%v\n%v", m2, m)
	}
}

func TestDrainRefusesImpossible(t *testing.T) {
	c := moveCluster(t, 3, 3, 3)
	drain := func(ids ...uint32) error {
		return c.Apply(&mgmtdpb.Command{Op: &mgmtdpb.Command_SetDraining{SetDraining: &mgmtdpb.SetDraining{Targets: ids, Draining: true}}})
	}
	if err := drain(1); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("drain with nowhere to go: %v", err)
	}
	if target(mapOf(t, c), 1).Draining {
		t.Fatal("a refused drain left its mark")
	}
	if err := drain(42); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("drain of an unknown target: %v", err)
	}
	addNode(t, c, 4, "")
	if err := drain(1, 2); !errors.Is(err, ErrBadCommand) || !strings.Contains(err.Error(), "2 draining replica(s) to replace") {
		t.Fatalf("drain of two replicas of chains with one target to go to: %v", err)
	}
	if err := drain(1); err != nil {
		t.Fatal(err)
	}
	if err := drain(2); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a second drain that, with the first, could not finish: %v", err)
	}
	if err := drain(1); err != nil { // idempotent
		t.Fatal(err)
	}
	if !target(mapOf(t, c), 1).Draining {
		t.Fatal("not draining")
	}
}

// settle plays the storage nodes' part: every moving chain's new target
// reports in sync.
func settle(t *testing.T, c *ClusterMap) {
	t.Helper()
	for _, ch := range mapOf(t, c).Chains {
		if ch.Move != nil {
			if err := synced(t, c, ch.Id, ch.Move.To); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// run proposes the planner's moves and completes them until it has none.
func runPlanner(t *testing.T, c *ClusterMap, maxMoves, perTarget int) (rounds int) {
	t.Helper()
	for rounds = 0; rounds < 1000; rounds++ {
		m := mapOf(t, c)
		moves := Plan(m, maxMoves, perTarget)
		if n := inFlight(m) + len(moves); n > maxMoves {
			t.Fatalf("%d moves in flight, throttle %d", n, maxMoves)
		}
		busy := map[uint32]int{}
		for _, mv := range moves {
			if target(m, mv.From).State != mgmtdpb.TargetState_OFFLINE { // a dead one does no work in a move
				busy[mv.From]++
			}
			busy[mv.To]++
			apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_MoveReplica{MoveReplica: mv}})
		}
		for id, n := range busy {
			if n > perTarget {
				t.Fatalf("target %d in %d moves at once, throttle %d", id, n, perTarget)
			}
		}
		if len(moves) == 0 {
			return rounds
		}
		checkDomains(t, mapOf(t, c))
		settle(t, c)
	}
	t.Fatal("the planner never finished")
	return
}

func checkDomains(t *testing.T, m *mgmtdpb.ClusterMap) {
	t.Helper()
	rack := map[string]string{}
	for _, n := range m.Nodes {
		rack[n.Id] = n.Rack
	}
	for _, ch := range m.Chains {
		seen := map[string]bool{}
		for _, id := range ch.Targets {
			if ch.Move != nil && ch.Move.From == id {
				continue // its replacement may share its domain
			}
			tg := target(m, id)
			d := FailureDomain(tg.Node, rack[tg.Node])
			if seen[d] {
				t.Fatalf("chain %d %v: two replicas in %s", ch.Id, ch.Targets, d)
			}
			seen[d] = true
		}
	}
}

func TestPlannerDrains(t *testing.T) {
	c := moveCluster(t, 6, 3, 12)
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetDraining{SetDraining: &mgmtdpb.SetDraining{Targets: []uint32{3}, Draining: true}}})
	if got := ToGo(mapOf(t, c)); got != 6 {
		t.Fatalf("to go: %d, want target 3's 6 chains", got)
	}
	if moves := Plan(mapOf(t, c), 4, 1); len(moves) == 0 || len(moves) > 1 {
		t.Fatalf("one target, one move at a time: %v", moves)
	}
	runPlanner(t, c, 4, 1)
	m := mapOf(t, c)
	if len(target(m, 3).Chains) != 0 || m.MovesDone != 6 || ToGo(m) != 0 {
		t.Fatalf("target 3 still in %v after %d moves", target(m, 3).Chains, m.MovesDone)
	}
	for _, ch := range m.Chains {
		if len(ch.Targets) != 3 || slices.Contains(ch.Targets, 3) {
			t.Fatalf("chain %d: %v", ch.Id, ch.Targets)
		}
	}
	// The replacements went to the least loaded: 36 replicas on 5 targets.
	for id, l := range loads(m) {
		if id != 3 && (l < 7 || l > 8) {
			t.Fatalf("target %d holds %d chains, want 7 or 8", id, l)
		}
	}
}

func TestPlannerReplacesADeadTarget(t *testing.T) {
	c := moveCluster(t, 5, 3, 10)
	apply(t, c, offline(2))
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetDraining{SetDraining: &mgmtdpb.SetDraining{Targets: []uint32{2}, Draining: true}}})
	if moves := Plan(mapOf(t, c), 8, 1); len(moves) < 4 {
		t.Fatalf("a dead target's chains are replaced %d at a time, want several (it does no work in them)", len(moves))
	}
	runPlanner(t, c, 8, 2)
	m := mapOf(t, c)
	for _, ch := range m.Chains {
		if len(routing.ChainFromMap(ch).Serving()) != 3 {
			t.Fatalf("chain %d: %s", ch.Id, members(t, c, ch.Id))
		}
	}
	if len(target(m, 2).Chains) != 0 {
		t.Fatalf("target 2 still in %v", target(m, 2).Chains)
	}
}

func TestPlannerRebalances(t *testing.T) {
	for _, tc := range []struct {
		nodes, add, chains int
		racks              bool
	}{{4, 1, 4, false}, {6, 3, 12, false}, {6, 3, 18, true}} {
		t.Run(fmt.Sprintf("%d+%d", tc.nodes, tc.add), func(t *testing.T) {
			var racks []string
			if tc.racks {
				for i := range tc.nodes {
					racks = append(racks, fmt.Sprint("r", i%3))
				}
			}
			c := moveCluster(t, tc.nodes, 3, tc.chains, racks...)
			for i := range tc.add {
				rack := ""
				if tc.racks {
					rack = fmt.Sprint("r", i%3)
				}
				addNode(t, c, uint32(tc.nodes+1+i), rack)
			}
			apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetRebalance{SetRebalance: &mgmtdpb.SetRebalance{On: true}}})
			want := ToGo(mapOf(t, c))
			runPlanner(t, c, 3, 1)
			m := mapOf(t, c)
			if int(m.MovesDone) != want {
				t.Fatalf("%d moves, ToGo said %d", m.MovesDone, want)
			}
			mean := float64(3*tc.chains) / float64(tc.nodes+tc.add)
			for _, tg := range m.Targets {
				if l := float64(loads(m)[tg.Id]); l < mean-1 || l > mean+1 {
					t.Fatalf("target %d holds %v chains, mean %.2f", tg.Id, l, mean)
				}
			}
		})
	}
}

func TestRetire(t *testing.T) {
	c := moveCluster(t, 4, 3, 4)
	retire := func(ids ...uint32) error {
		return c.Apply(&mgmtdpb.Command{Op: &mgmtdpb.Command_RetireTargets{RetireTargets: &mgmtdpb.RetireTargets{Targets: ids}}})
	}
	if err := retire(2); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("retire of a target not draining: %v", err)
	}
	apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetDraining{SetDraining: &mgmtdpb.SetDraining{Targets: []uint32{2}, Draining: true}}})
	if err := retire(2); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("retire of a target still in chains: %v", err)
	}
	runPlanner(t, c, 4, 1)
	if err := retire(2); err != nil {
		t.Fatal(err)
	}
	if err := retire(2); err != nil { // idempotent
		t.Fatal(err)
	}
	m := mapOf(t, c)
	if target(m, 2) != nil || slices.ContainsFunc(m.Nodes, func(n *mgmtdpb.Node) bool { return n.Id == "s2" }) || len(m.Nodes) != 3 {
		t.Fatalf("target 2 or node s2 still in the map: %v", m.Nodes)
	}
}

// TestPlannerAtScale: at 200 nodes of 10 targets each (2,000 chains of 3),
// planning a node's drain and counting what a rebalance after adding 20
// nodes needs take well under a second each: the planner runs on every
// change of the map, and status asks for ToGo.
func TestPlannerAtScale(t *testing.T) {
	const nodes, per = 200, 10
	m := &mgmtdpb.ClusterMap{}
	addNodes := func(from, to int) {
		for n := from; n < to; n++ {
			m.Nodes = append(m.Nodes, &mgmtdpb.Node{Id: fmt.Sprint("s", n), Address: fmt.Sprint("a", n)})
			for k := range per {
				m.Targets = append(m.Targets, &mgmtdpb.Target{Id: uint32(n*per + k + 1), Node: fmt.Sprint("s", n), State: mgmtdpb.TargetState_SERVING})
			}
		}
	}
	addNodes(0, nodes)
	if err := createTable(m, &mgmtdpb.CreateChainTable{Table: 1, Replicas: 3, Chains: nodes * per, Placement: PlacementBalanced}); err != nil {
		t.Fatal(err)
	}
	addNodes(nodes, nodes+20)
	for _, tg := range m.Targets[:per] {
		tg.Draining = true
	}
	m.Rebalance = true
	start := time.Now()
	moves := Plan(m, 64, 1)
	planned := time.Since(start)
	start = time.Now()
	togo := ToGo(m)
	counted := time.Since(start)
	t.Logf("plan: %d moves in %v; to go: %d, counted in %v", len(moves), planned, togo, counted)
	if len(moves) != 64 || togo < 300 {
		t.Fatalf("plan %d moves, to go %d", len(moves), togo)
	}
	if planned > 5*time.Second || counted > 30*time.Second { // bounds against a quadratic blow-up, loose for -race
		t.Fatalf("too slow: plan %v, to go %v", planned, counted)
	}
}

// TestLeavingWaitsForFullChain: a replaced replica stays, serving, while
// the chain lacks another (one died during the move); it leaves once the
// chain has its replicas again, by the dead one's return or by another
// move replacing it.
func TestLeavingWaitsForFullChain(t *testing.T) {
	for _, back := range []string{"returns", "replaced"} {
		t.Run(back, func(t *testing.T) {
			c := moveCluster(t, 3, 3, 1)
			addNode(t, c, 4, "")
			addNode(t, c, 5, "")
			apply(t, c, move(1, 2, 4))
			apply(t, c, offline(3))
			if err := synced(t, c, 1, 4); err != nil {
				t.Fatal(err)
			}
			m := mapOf(t, c)
			if got := members(t, c, 1); got != "1:serving 2:serving 4:serving " || !slices.Equal(chain(m, 1).Leaving, []uint32{2}) || m.MovesDone != 1 {
				t.Fatalf("after the move, with target 3 dead: %s, leaving %v, done %d", got, chain(m, 1).Leaving, m.MovesDone)
			}
			if back == "returns" {
				apply(t, c, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: 3}})
				if got := members(t, c, 1); got != "1:serving 2:serving 4:serving 3:syncing " {
					t.Fatalf("target 3 back: %s", got)
				}
				if err := synced(t, c, 1, 3); err != nil {
					t.Fatal(err)
				}
			} else {
				apply(t, c, move(1, 3, 5)) // the dead one replaced; 2 leaving does not block it
				if err := synced(t, c, 1, 5); err != nil {
					t.Fatal(err)
				}
			}
			m = mapOf(t, c)
			if got := members(t, c, 1); len(chain(m, 1).Leaving) != 0 || slices.Contains(target(m, 2).Chains, 1) || strings.Contains(got, "2:") || len(routing.ChainFromMap(chain(m, 1)).Serving()) != 3 {
				t.Fatalf("chain full again: %s, leaving %v, target 2 in %v", got, chain(m, 1).Leaving, target(m, 2).Chains)
			}
		})
	}
}
