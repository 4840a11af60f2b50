package mgmtd

import (
	"fmt"
	"slices"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// grid is a cluster of nodes × perNode targets, node i named node-%04d,
// its targets numbered i*perNode+1 … (i+1)*perNode.
func grid(nodes, perNode int) []*mgmtdpb.Target {
	targets := make([]*mgmtdpb.Target, 0, nodes*perNode)
	for n := 0; n < nodes; n++ {
		for k := 0; k < perNode; k++ {
			targets = append(targets, &mgmtdpb.Target{Id: uint32(n*perNode + k + 1), Node: fmt.Sprintf("node-%04d", n)})
		}
	}
	return targets
}

// figures describes a chain table by what a node failure costs.
type figures struct {
	nodes, replicas int
	// maxShare is the most chains two nodes share; idealShare the least
	// that maximum can be (the mean over all pairs, rounded up).
	maxShare, idealShare int
	// minPeers is the fewest distinct nodes one node's chains touch;
	// idealPeers the most that can be (every other replica slot of the
	// node's chains on another node, or every other node).
	minPeers, idealPeers int
	// recovery is, for the worst node to fail and be replaced, the most
	// bytes one surviving node resends over the mean per surviving node,
	// each chain resent whole by its last member not on the failed node
	// (the replacement rejoins at the tail and its predecessor resyncs
	// it); idealRecovery is the least the integers allow (the failed
	// node's chains over the survivors, rounded up, over the mean).
	recovery, idealRecovery float64
	// resyncOver is the most chains of one failed node that one survivor
	// resends beyond the fair count (the failed node's chains over the
	// survivors, rounded up), over every failed node.
	resyncOver int
	// heads and tails are the fewest and most chains a node heads, ends.
	heads, tails [2]int
}

func (f figures) String() string {
	return fmt.Sprintf("%5d nodes: max pair share %d (ideal %d), min distinct peers %d (ideal %d), resync max/mean %.2f (ideal %.2f), heads %d..%d, tails %d..%d",
		f.nodes, f.maxShare, f.idealShare, f.minPeers, f.idealPeers, f.recovery, f.idealRecovery, f.heads[0], f.heads[1], f.tails[0], f.tails[1])
}

// measure computes the figures of chains placed over targets.
func measure(targets []*mgmtdpb.Target, chains [][]uint32) figures {
	index := map[string]int{}
	nodeOf := map[uint32]int{}
	for _, t := range targets {
		if _, ok := index[t.Node]; !ok {
			index[t.Node] = len(index)
		}
		nodeOf[t.Id] = index[t.Node]
	}
	n := len(index)
	share := make([]int, n*n)
	// resync[v*n+s]: v's chains s resends when v is replaced.
	resync := make([]int, n*n)
	load := make([]int, n)
	heads, tails := make([]int, n), make([]int, n)
	replicas := 0
	for _, c := range chains {
		replicas = max(replicas, len(c))
		heads[nodeOf[c[0]]]++
		tails[nodeOf[c[len(c)-1]]]++
		for i, a := range c {
			x := nodeOf[a]
			load[x]++
			for _, b := range c[:i] {
				y := nodeOf[b]
				share[x*n+y]++
				share[y*n+x]++
			}
			// The last member on another node resends x's replica.
			for j := len(c) - 1; j >= 0; j-- {
				if y := nodeOf[c[j]]; y != x {
					resync[x*n+y]++
					break
				}
			}
		}
	}
	f := figures{nodes: n, replicas: replicas, minPeers: n,
		heads: [2]int{slices.Min(heads), slices.Max(heads)}, tails: [2]int{slices.Min(tails), slices.Max(tails)}}
	pairs := 0
	for a := 0; a < n; a++ {
		peers, sum := 0, 0
		for b := 0; b < n; b++ {
			s := share[a*n+b]
			if s > 0 {
				peers++
			}
			sum += s
			f.maxShare = max(f.maxShare, s)
		}
		pairs += sum
		f.minPeers = min(f.minPeers, peers)
		if load[a] > 0 && n > 1 && replicas > 1 {
			// a's chains over n-1 survivors: mean load/(n-1) each.
			mean := float64(load[a]) / float64(n-1)
			most := slices.Max(resync[a*n : (a+1)*n])
			f.recovery = max(f.recovery, float64(most)/mean)
			f.idealRecovery = max(f.idealRecovery, float64(ceilInt(mean))/mean)
			f.resyncOver = max(f.resyncOver, most-ceilInt(mean))
		}
	}
	if n > 1 && replicas > 1 {
		mean := float64(pairs) / float64(n*(n-1)) // per ordered pair
		f.idealShare = ceilInt(mean)
		f.idealPeers = min(n-1, len(chains)*replicas*(replicas-1)/n)
	}
	return f
}

func ceilInt(x float64) int {
	i := int(x)
	if float64(i) < x-1e-9 {
		i++
	}
	return i
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}
