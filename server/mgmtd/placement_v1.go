package mgmtd

import (
	"fmt"
	"slices"
	"sort"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Placement algorithms, as CreateChainTable.placement names them. A
// table is computed when its command is applied, so every replica, and
// every later build replaying the log, must compute the same one: an
// algorithm, once used, never changes, and a better one gets a new number.
const (
	placementFirst    = 0 // placeFirst: nodes only, greedy (commands from before the field)
	PlacementBalanced = 2 // failure domains, balanced pair shares, heads even (orderEven)
	PlacementSpread   = 3 // the same, each failed node's resyncs spread over the others (Place)
)

// placeFirst is the first placement, kept as it was so that chain tables
// made by it come out the same on replay: replicas targets on distinct
// nodes for each of chains chains, each chain taking the least-loaded
// nodes, ties broken by how rarely they already share chains with those
// chosen so far, and on each node its least-loaded target.
func placeFirst(targets []*mgmtdpb.Target, replicas, chains int) ([][]uint32, error) {
	byNode := map[string][]uint32{}
	for _, t := range targets {
		byNode[t.Node] = append(byNode[t.Node], t.Id)
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
		sort.Slice(byNode[n], func(i, j int) bool { return byNode[n][i] < byNode[n][j] })
	}
	sort.Strings(nodes)
	if replicas < 1 || replicas > len(nodes) || chains < 1 {
		return nil, fmt.Errorf("%w: %d replicas on %d nodes, %d chains", ErrBadCommand, replicas, len(nodes), chains)
	}
	nodeLoad := map[string]int{}
	targetLoad := map[uint32]int{}
	pair := map[[2]string]int{}
	key := func(a, b string) [2]string {
		if a > b {
			a, b = b, a
		}
		return [2]string{a, b}
	}
	better := func(a, b string, chosen []string) bool {
		if nodeLoad[a] != nodeLoad[b] {
			return nodeLoad[a] < nodeLoad[b]
		}
		pa, pb := 0, 0
		for _, c := range chosen {
			pa += pair[key(a, c)]
			pb += pair[key(b, c)]
		}
		if pa != pb {
			return pa < pb
		}
		return a < b
	}
	out := make([][]uint32, 0, chains)
	for i := 0; i < chains; i++ {
		var chosen []string
		for k := 0; k < replicas; k++ {
			best := ""
			for _, n := range nodes {
				if slices.Contains(chosen, n) {
					continue
				}
				if best == "" || better(n, best, chosen) {
					best = n
				}
			}
			chosen = append(chosen, best)
		}
		var ts []uint32
		for k, n := range chosen {
			t := byNode[n][0]
			for _, c := range byNode[n] {
				if targetLoad[c] < targetLoad[t] {
					t = c
				}
			}
			ts = append(ts, t)
			targetLoad[t]++
			nodeLoad[n]++
			for _, o := range chosen[:k] {
				pair[key(n, o)]++
			}
		}
		out = append(out, ts)
	}
	return out, nil
}
