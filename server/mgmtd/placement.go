package mgmtd

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/sluicefs/sluice/internal/mix"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Placement: a chain table is placed once, when it is created (the
// CreateChainTable command, applied inside the Raft state machine), and never
// reshuffled afterwards, since moving a chain's replicas moves its data.
// Place is therefore a pure function of its input: it iterates no map, reads
// no clock, uses integers only, and draws its swap partners from a fixed
// sequence (internal/mix), so every replica applying the command computes
// the same table (TestPlaceGolden pins one).
//
// The goals, in order:
//
//  1. No two replicas of a chain share a failure domain: a node, or a rack
//     when the node registered one (a node without a rack is a domain of its
//     own). With fewer domains than replicas Place refuses.
//  2. Every target holds its share of the replicas: the replica slots are
//     apportioned to domains by their targets (no domain can hold more than
//     one replica of every chain, so a domain too large is capped and the
//     rest share its excess), then to nodes, then to targets.
//  3. When a node fails, the chains it held are re-read from as many other
//     nodes as possible, each reading about as much: the pairs of nodes that
//     share chains are kept as even as the numbers allow. With r replicas a
//     node holding c chains has c·(r-1) peer slots; the ideal is that they
//     all name different nodes (a balanced incomplete block design when the
//     numbers admit one) and otherwise that no pair shares more than the
//     mean rounded up.
//
// Goal 3 is met greedily, chain by chain: each replica goes to the node
// that shares fewest chains with the replicas chosen so far, among nodes
// with slots left in domains not yet used by the chain, preferring the node
// with the most slots left. A domain with as many slots left as chains left
// must take a replica of every remaining chain, so it is served first; that
// keeps the fill feasible to the last chain. A second pass then swaps
// replicas between chains (same node loads, same domain rule) while that
// lowers the sum of squared pair shares, which removes the pairs left
// sharing more than the ideal (all of them at 10 to 1,000 nodes of 10
// targets; BENCHMARKS.md). Last, each chain's replicas are ordered so
// every node heads about as many chains as every other and, since a
// syncing replica is resynced by its predecessor alone and a replacement
// rejoins at the tail, so that a replaced node's chains are resent by
// every other node about equally (PlacementSpread, placement_spread.go;
// PlacementBalanced, placement_v2.go, evened heads and tails only, and
// left some survivors resending twice their share and others none).
//
// Its cost is about chains·replicas·nodes for the fill and a few passes of
// chains·replicas² for the swaps: 1,000 nodes of 10 targets take well under
// a second (BenchmarkPlace).

// placer holds one placement's state; nodes, domains and targets are
// numbered in a sorted order so nothing depends on input order or maps.
type placer struct {
	replicas, chains int
	nodeIDs          []string
	nodeDomain       []int
	nodeTargets      [][]uint32 // sorted ids per node
	domainNodes      [][]int
	domainNames      []string
	leftD, leftN     []int   // replica slots left per domain, per node
	leftT            [][]int // per node, per target (nodeTargets' order)
	peers            [][]peer
	mark             []int // scratch: shares with the chosen, per node
}

type peer struct{ node, chains int32 }

// FailureDomain names the failure domain of node: its rack when it has
// one, else the node itself. No two replicas of a chain share one.
func FailureDomain(node, rack string) string {
	if rack != "" {
		return "rack " + rack
	}
	return "node " + node
}

// Place chooses replicas targets for each of chains chains under the rules
// above, with the newest algorithm (PlacementSpread). racks maps a node's
// id to its rack; nil or a missing entry places that node by itself. The
// result lists each chain's targets, head first.
func Place(targets []*mgmtdpb.Target, racks map[string]string, replicas, chains int) ([][]uint32, error) {
	return placeVersion(PlacementSpread, targets, racks, replicas, chains)
}

// placeVersion is Place with the algorithm a CreateChainTable names:
// PlacementBalanced or PlacementSpread, which differ only in how each
// chain's replicas are ordered.
func placeVersion(version uint32, targets []*mgmtdpb.Target, racks map[string]string, replicas, chains int) ([][]uint32, error) {
	if replicas < 1 || chains < 1 {
		return nil, fmt.Errorf("%w: a chain table needs at least one chain and one replica, asked for %d chains of %d", ErrBadCommand, chains, replicas)
	}
	p, err := newPlacer(targets, racks, replicas, chains)
	if err != nil {
		return nil, err
	}
	placed := p.fill()
	p.improve(placed)
	switch version {
	case PlacementBalanced:
		return p.orderEven(placed), nil
	case PlacementSpread:
		return p.orderSpread(placed), nil
	}
	return nil, fmt.Errorf("%w: placement algorithm %d is unknown to this build", ErrBadCommand, version)
}

func newPlacer(targets []*mgmtdpb.Target, racks map[string]string, replicas, chains int) (*placer, error) {
	p := &placer{replicas: replicas, chains: chains}
	byNode := map[string][]uint32{}
	for _, t := range targets {
		if _, ok := byNode[t.Node]; !ok {
			p.nodeIDs = append(p.nodeIDs, t.Node)
		}
		byNode[t.Node] = append(byNode[t.Node], t.Id)
	}
	slices.Sort(p.nodeIDs)
	domainOf := map[string]int{}
	for i, n := range p.nodeIDs {
		ts := slices.Clone(byNode[n])
		slices.Sort(ts)
		p.nodeTargets = append(p.nodeTargets, slices.Compact(ts))
		name := FailureDomain(n, racks[n])
		d, ok := domainOf[name]
		if !ok {
			d = len(p.domainNames)
			domainOf[name] = d
			p.domainNames = append(p.domainNames, name)
			p.domainNodes = append(p.domainNodes, nil)
		}
		p.nodeDomain = append(p.nodeDomain, d)
		p.domainNodes[d] = append(p.domainNodes[d], i)
	}
	if len(p.domainNames) < replicas {
		return nil, fmt.Errorf("%w: %d replicas need as many failure domains, and the %d targets are on %d nodes in %d domains (a rack, or a node without one)",
			ErrBadCommand, replicas, len(targets), len(p.nodeIDs), len(p.domainNames))
	}
	// Apportion the replica slots: to domains by target count, each capped
	// at one per chain; within a domain to nodes, within a node to targets.
	weights := make([]int, len(p.domainNames))
	for i, ts := range p.nodeTargets {
		weights[p.nodeDomain[i]] += len(ts)
	}
	p.leftD = apportion(chains*replicas, weights, chains)
	p.leftN = make([]int, len(p.nodeIDs))
	for d, nodes := range p.domainNodes {
		w := make([]int, len(nodes))
		for k, n := range nodes {
			w[k] = len(p.nodeTargets[n])
		}
		for k, q := range apportion(p.leftD[d], w, chains) {
			p.leftN[nodes[k]] = q
		}
	}
	for n, ts := range p.nodeTargets {
		ones := make([]int, len(ts))
		for k := range ones {
			ones[k] = 1
		}
		p.leftT = append(p.leftT, apportion(p.leftN[n], ones, chains))
	}
	p.peers = make([][]peer, len(p.nodeIDs))
	p.mark = make([]int, len(p.nodeIDs))
	return p, nil
}

// apportion splits total in proportion to weights, by largest remainder
// (ties to the lower index), no share above limit: a share that would pass
// it is held at it and the rest split again among the others. The callers
// ensure the limits leave room for the total.
func apportion(total int, weights []int, limit int) []int {
	q := make([]int, len(weights))
	fixed := make([]bool, len(weights))
	for {
		left, w := total, 0
		var open []int
		for i := range weights {
			if fixed[i] {
				left -= q[i]
			} else {
				w += weights[i]
				open = append(open, i)
			}
		}
		if w == 0 {
			return q
		}
		rem := make([]int, len(weights))
		spare := left
		for _, i := range open {
			q[i] = left * weights[i] / w
			rem[i] = left * weights[i] % w
			spare -= q[i]
		}
		slices.SortStableFunc(open, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
		for k := 0; k < spare; k++ {
			q[open[k%len(open)]]++
		}
		over := false
		for i := range q {
			if !fixed[i] && q[i] > limit {
				q[i], fixed[i], over = limit, true, true
			}
		}
		if !over {
			return q
		}
	}
}

// peerCount is node's count in ps (0 when it has none).
func peerCount(ps []peer, node int) int {
	for _, x := range ps {
		if int(x.node) == node {
			return int(x.chains)
		}
	}
	return 0
}

// addPeer adds delta to node's count in ps, appending it when it has none
// and dropping it at zero, and returns the list.
func addPeer(ps []peer, node, delta int) []peer {
	k := slices.IndexFunc(ps, func(x peer) bool { return int(x.node) == node })
	if k < 0 {
		return append(ps, peer{node: int32(node), chains: int32(delta)})
	}
	ps[k].chains += int32(delta)
	if ps[k].chains == 0 {
		return slices.Delete(ps, k, k+1)
	}
	return ps
}

// share is how many chains nodes a and b share so far.
func (p *placer) share(a, b int) int { return peerCount(p.peers[a], b) }

// link adds delta to the chains a and b share.
func (p *placer) link(a, b, delta int) {
	p.peers[a] = addPeer(p.peers[a], b, delta)
	p.peers[b] = addPeer(p.peers[b], a, delta)
}

// fill places every chain greedily; a chain is a list of node numbers.
func (p *placer) fill() [][]int {
	out := make([][]int, 0, p.chains)
	used := make([]bool, len(p.domainNames))
	for i := 0; i < p.chains; i++ {
		left := p.chains - i
		chosen := make([]int, 0, p.replicas)
		// Shares with the chosen nodes, kept in p.mark.
		choose := func(n int) {
			chosen = append(chosen, n)
			used[p.nodeDomain[n]] = true
			p.leftD[p.nodeDomain[n]]--
			p.leftN[n]--
			for _, x := range p.peers[n] {
				p.mark[x.node] += int(x.chains)
			}
		}
		// Rotate the tie-break so equal nodes take turns.
		rot := (i * 7919) % len(p.nodeIDs)
		better := func(a, b int) bool {
			if b < 0 {
				return true
			}
			if p.mark[a] != p.mark[b] {
				return p.mark[a] < p.mark[b]
			}
			if p.leftN[a] != p.leftN[b] {
				return p.leftN[a] > p.leftN[b]
			}
			ra := (a - rot + len(p.nodeIDs)) % len(p.nodeIDs)
			rb := (b - rot + len(p.nodeIDs)) % len(p.nodeIDs)
			return ra < rb
		}
		for d := range p.domainNames {
			if p.leftD[d] == left && !used[d] {
				best := -1
				for _, n := range p.domainNodes[d] {
					if p.leftN[n] > 0 && better(n, best) {
						best = n
					}
				}
				choose(best)
			}
		}
		for len(chosen) < p.replicas {
			best := -1
			for n := range p.nodeIDs {
				if p.leftN[n] > 0 && !used[p.nodeDomain[n]] && better(n, best) {
					best = n
				}
			}
			choose(best)
		}
		for k, n := range chosen {
			used[p.nodeDomain[n]] = false
			for _, x := range p.peers[n] {
				p.mark[x.node] = 0
			}
			for _, o := range chosen[:k] {
				p.link(n, o, 1)
			}
		}
		out = append(out, chosen)
	}
	return out
}

// improve swaps replicas between chains while a swap lowers the sum of
// squared pair shares; node loads and the domain rule are kept. It looks
// only at chains holding a pair that shares more chains than the mean
// rounded up, and tries partners drawn from a fixed sequence, so the result
// is the same on every run.
func (p *placer) improve(placed [][]int) {
	n := len(p.nodeIDs)
	if n < 2 || p.replicas < 2 {
		return
	}
	// The mean pairs per pair of nodes, rounded up.
	num, den := p.chains*p.replicas*(p.replicas-1), n*(n-1)
	limit := (num + den - 1) / den
	// Draws come from internal/mix, which never changes: math/rand's
	// methods may change between Go releases, and replicas of the state
	// machine built by different releases must place alike.
	draws := uint64(0)
	draw := func(n int) int {
		draws++
		return int(mix.Mix64(draws*0x9e3779b97f4a7c15) % uint64(n))
	}
	const passes, tries = 8, 64
	for pass := 0; pass < passes; pass++ {
		swapped := false
		for a := range placed {
			for i := 0; i < p.replicas; i++ {
				for k := i + 1; k < p.replicas; k++ {
					if p.share(placed[a][i], placed[a][k]) <= limit {
						continue
					}
					for try := 0; try < tries; try++ {
						b, j := draw(len(placed)), draw(p.replicas)
						at := i
						if try%2 == 1 {
							at = k
						}
						if b != a && p.swap(placed[a], at, placed[b], j) {
							swapped = true
							break
						}
					}
				}
			}
		}
		if !swapped {
			return
		}
	}
}

// swap exchanges a[i] and b[j] if that keeps the domain rule and lowers
// the sum of squared pair shares, and says whether it did.
func (p *placer) swap(a []int, i int, b []int, j int) bool {
	x, y := a[i], b[j]
	for _, o := range a {
		if o != x && p.nodeDomain[o] == p.nodeDomain[y] {
			return false
		}
	}
	for _, o := range b {
		if o != y && p.nodeDomain[o] == p.nodeDomain[x] {
			return false
		}
	}
	type change struct{ u, v, d int }
	var changes []change
	add := func(u, v, d int) {
		u, v = min(u, v), max(u, v)
		for k := range changes {
			if changes[k].u == u && changes[k].v == v {
				changes[k].d += d
				return
			}
		}
		changes = append(changes, change{u, v, d})
	}
	for _, o := range a {
		if o != x {
			add(x, o, -1)
			add(y, o, 1)
		}
	}
	for _, o := range b {
		if o != y {
			add(y, o, -1)
			add(x, o, 1)
		}
	}
	delta := 0
	for _, c := range changes {
		s := p.share(c.u, c.v)
		delta += (s+c.d)*(s+c.d) - s*s
	}
	if delta >= 0 {
		return false
	}
	for _, c := range changes {
		if c.d != 0 {
			p.link(c.u, c.v, c.d)
		}
	}
	a[i], b[j] = y, x
	return true
}

// balanceHeads moves heads from nodes heading more chains than their share
// (a node's replicas ÷ replicas, rounded up) to nodes heading fewer than it
// (rounded down), along a path of chains: the head of a chain hands the
// head to another replica of it, which hands one of its own on, until a
// node short of heads takes one. Writes enter at the head, so this evens
// the write load; the greedy order alone leaves some nodes one off.
func (p *placer) balanceHeads(placed [][]int) {
	n, r := len(p.nodeIDs), p.replicas
	load := make([]int, n)
	heads := make([]int, n)
	headed := make([][]int, n)
	for ci, c := range placed {
		for _, x := range c {
			load[x]++
		}
		heads[c[0]]++
		headed[c[0]] = append(headed[c[0]], ci)
	}
	type step struct{ from, chain int }
	parent := make([]step, n)
	seen := make([]bool, n)
	for u := 0; u < n; u++ {
		for heads[u] > (load[u]+r-1)/r {
			clear(seen)
			seen[u] = true
			queue, found := []int{u}, -1
			for len(queue) > 0 && found < 0 {
				x := queue[0]
				queue = queue[1:]
				for _, ci := range headed[x] {
					for _, y := range placed[ci][1:] {
						if seen[y] {
							continue
						}
						seen[y], parent[y] = true, step{x, ci}
						if heads[y] < load[y]/r {
							found = y
							break
						}
						queue = append(queue, y)
					}
					if found >= 0 {
						break
					}
				}
			}
			if found < 0 {
				break
			}
			for y := found; y != u; {
				st := parent[y]
				c := placed[st.chain]
				k := slices.Index(c, y)
				c[0], c[k] = y, st.from
				headed[st.from] = slices.DeleteFunc(headed[st.from], func(ci int) bool { return ci == st.chain })
				headed[y] = append(headed[y], st.chain)
				y = st.from
			}
			heads[u]--
			heads[found]++
		}
	}
}

// targets names each replica's target: on its node, the target with the
// most replica slots left.
func (p *placer) targets(placed [][]int) [][]uint32 {
	out := make([][]uint32, 0, len(placed))
	for _, c := range placed {
		ts := make([]uint32, len(c))
		for k, n := range c {
			left := p.leftT[n]
			best := 0
			for j := range left {
				if left[j] > left[best] {
					best = j
				}
			}
			left[best]--
			ts[k] = p.nodeTargets[n][best]
		}
		out = append(out, ts)
	}
	return out
}
