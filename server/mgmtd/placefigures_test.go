package mgmtd

import (
	"fmt"

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
	// recovery is, for the worst node to fail, the most bytes one surviving
	// node reads to re-replicate the failed node's chains over the mean per
	// surviving node (each chain's bytes read evenly from its surviving
	// replicas); idealRecovery is the least the integers allow.
	recovery, idealRecovery float64
}

func (f figures) String() string {
	return fmt.Sprintf("%5d nodes: max pair share %d (ideal %d), min distinct peers %d (ideal %d), recovery max/mean %.2f (ideal %.2f)",
		f.nodes, f.maxShare, f.idealShare, f.minPeers, f.idealPeers, f.recovery, f.idealRecovery)
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
	load := make([]int, n)
	replicas := 0
	for _, c := range chains {
		replicas = max(replicas, len(c))
		for i, a := range c {
			load[nodeOf[a]]++
			for _, b := range c[:i] {
				x, y := nodeOf[a], nodeOf[b]
				share[x*n+y]++
				share[y*n+x]++
			}
		}
	}
	f := figures{nodes: n, replicas: replicas, minPeers: n}
	pairs := 0
	for a := 0; a < n; a++ {
		peers, sum, hi := 0, 0, 0
		for b := 0; b < n; b++ {
			s := share[a*n+b]
			if s > 0 {
				peers++
			}
			sum += s
			hi = max(hi, s)
			f.maxShare = max(f.maxShare, s)
		}
		pairs += sum
		f.minPeers = min(f.minPeers, peers)
		if sum > 0 {
			// Survivor b reads share/(replicas-1) of a chain per shared
			// chain; the mean is sum/(replicas-1) over n-1 survivors.
			f.recovery = max(f.recovery, float64(hi)*float64(n-1)/float64(sum))
		}
	}
	if n > 1 && replicas > 1 {
		mean := float64(pairs) / float64(n*(n-1)) // per ordered pair
		f.idealShare = ceilInt(mean)
		f.idealPeers = min(n-1, len(chains)*replicas*(replicas-1)/n)
		f.idealRecovery = float64(f.idealShare) / mean
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
