package mgmtd

import "slices"

// orderSpread is PlacementSpread's ordering step. A syncing target is
// resynced by its predecessor alone (server/storage/sync.go), and a
// replacement rejoins its chains at the tail, so when node v fails each of
// its chains is resent by one survivor: the chain's last member not on v
// (the tail, or the member before it where v is the tail). Evening the
// pairs of nodes that share chains is not enough for that: with chains
// a → b → c, c resends a's and b's chains and a resends none of them.
//
// So each chain's order is chosen, among the orders that differ in head,
// tail or the member before the tail (all 6 of 3 replicas), to keep:
// every node heading its share of chains (writes enter at the head); for
// every node v, how many of v's chains each other node would resend as
// even as the shares allow (the sum over v and s of that count squared,
// more above a fair share); every node ending its share of chains. A
// greedy pass picks each chain's best order against the counts of the
// chains before it; passes over every chain then re-pick its order
// against all the others while that lowers the sum, heads weighing like
// the rest so they can move where the resyncs need them. balanceHeads
// evens the heads those passes left off their share, and the last passes
// put heads first, moving none out of its share (rounded up or down),
// alternating with pairUp, which re-picks two chains at once.
func (p *placer) orderSpread(placed [][]int) [][]uint32 {
	if p.replicas < 2 {
		return p.targets(placed)
	}
	o := &orderCost{r: p.replicas, load: make([]int, len(p.nodeIDs))}
	for _, c := range placed {
		for _, n := range c {
			o.load[n]++
		}
	}
	o.fair = make([]int, len(o.load))
	for v, l := range o.load {
		o.fair[v] = (l + len(o.load) - 2) / (len(o.load) - 1)
	}
	o.count(nil)
	for _, c := range placed {
		o.arrange(c, 1, false)
		o.add(c, 1)
	}
	o.descend(placed, 1, false)
	p.balanceHeads(placed)
	o.count(placed)
	o.descend(placed, headsFirst, true)
	for round := 0; round < pairRounds && o.pairUp(placed); round++ {
		o.descend(placed, headsFirst, true)
	}
	return p.targets(placed)
}

// orderCost holds the counts orderSpread evens, per node (numbered as in
// placer).
type orderCost struct {
	r            int
	load         []int // replicas per node
	heads, tails []int // chains each node heads, ends
	// src[v] lists, for the nodes that would resync some of v's chains
	// were v replaced, how many each would.
	src  [][]peer
	fair []int // per node: its chains over the other nodes, rounded up
	cand []int // scratch: an order being weighed
}

// count sets the counts from placed.
func (o *orderCost) count(placed [][]int) {
	n := len(o.load)
	o.heads, o.tails, o.src = make([]int, n), make([]int, n), make([][]peer, n)
	for _, c := range placed {
		o.add(c, 1)
	}
}

// source is the member of chain c (in its order) that resyncs a
// replacement of c[k] appended at the tail.
func source(c []int, k int) int {
	if k == len(c)-1 {
		return c[k-1]
	}
	return c[len(c)-1]
}

// sources is how many of v's chains s would resync.
func (o *orderCost) sources(v, s int) int { return peerCount(o.src[v], s) }

// add adds chain c, in its order, to the counts d times (-1 removes it).
func (o *orderCost) add(c []int, d int) {
	o.heads[c[0]] += d
	o.tails[c[len(c)-1]] += d
	for k, v := range c {
		o.src[v] = addPeer(o.src[v], source(c, k), d)
	}
}

// share is how far node n is from its share of heads or tails (count of
// them), times replicas: 0 at the mean, r for one chain more.
func (o *orderCost) share(n, count int) int { return o.r*count - o.load[n] }

// Weights of orderSpread's costs. A resync count above its fair share
// (the node's chains over the other nodes, rounded up) costs overFair
// times its square more: the sum of squares alone settles with a few
// counts above it. headsFirst weighs heads above everything else in the
// last passes.
const (
	overFair   = 16
	headsFirst = 1 << 20
	pairRounds = 8
)

// cost is what adding chain c in order to the counts adds: to the squared
// distances of heads from their shares (head), and to the squared resync
// counts, weighted as above, plus the squared distances of tails from
// their shares (rest). Shares are counted times replicas (share), so a
// resync count is too.
func (o *orderCost) cost(c []int) (head, rest int) {
	r := o.r
	head = r * (2*o.share(c[0], o.heads[c[0]]) + r)
	t := c[len(c)-1]
	rest = r * (2*o.share(t, o.tails[t]) + r)
	for k, v := range c {
		x := o.sources(v, source(c, k))
		add := 2*x + 1
		if over := x + 1 - o.fair[v]; over > 0 {
			add += overFair * (2*over - 1)
		}
		rest += r * r * add
	}
	return head, rest
}

// inShare says whether node n may head chains heads with chains of its
// own: its share, load ÷ replicas, rounded down or up.
func (o *orderCost) inShare(n, heads int) bool {
	return heads*o.r >= o.load[n]-o.r+1 && heads*o.r <= o.load[n]+o.r-1
}

// orders calls fn with each order of chain c worth weighing, built in buf
// (len(c) long): every choice of head, tail and the member before the
// tail, the others in c's order between them.
func orders(c, buf []int, fn func(order []int)) {
	r := len(c)
	for h := range r {
		for t := range r {
			if t == h {
				continue
			}
			for b := range r {
				if b == t || b == h && r > 2 || b != h && r == 2 {
					continue
				}
				buf[0], buf[r-2], buf[r-1] = c[h], c[b], c[t]
				k := 1
				for i, n := range c {
					if i != h && i != b && i != t {
						buf[k] = n
						k++
					}
				}
				fn(buf)
			}
		}
	}
}

// arrange reorders chain c, which the counts leave out, to its cheapest
// order (the first such, keeping c's own on a tie), heads weighing hw
// times the rest; with keepHeads, to none that takes a node's heads out of
// its share. It says whether c changed.
func (o *orderCost) arrange(c []int, hw int, keepHeads bool) bool {
	head, rest := o.cost(c)
	bestCost := hw*head + rest
	best := slices.Clone(c)
	o.cand = slices.Grow(o.cand[:0], len(c))[:len(c)]
	orders(c, o.cand, func(cand []int) {
		if keepHeads && cand[0] != c[0] && (!o.inShare(cand[0], o.heads[cand[0]]+1) || !o.inShare(c[0], o.heads[c[0]])) {
			return
		}
		if head, rest := o.cost(cand); hw*head+rest < bestCost {
			bestCost = hw*head + rest
			copy(best, cand)
		}
	})
	if slices.Equal(best, c) {
		return false
	}
	copy(c, best)
	return true
}

// over says whether chain c, in the counts, makes a node resync more of
// another's chains than its fair share.
func (o *orderCost) over(c []int) bool {
	for k, v := range c {
		if o.sources(v, source(c, k)) > o.fair[v] {
			return true
		}
	}
	return false
}

// pairUp re-picks the orders of two chains that share a node at once,
// where one of them makes a resync count over its fair share: together
// they can trade a head, which one chain alone cannot without leaving its
// share. Heads weigh headsFirst times the rest. It says whether any pair
// changed.
func (o *orderCost) pairUp(placed [][]int) bool {
	byNode := make([][]int, len(o.load))
	for i, c := range placed {
		for _, n := range c {
			byNode[n] = append(byNode[n], i)
		}
	}
	moved := false
	for i, a := range placed {
		for _, n := range a {
			for _, j := range byNode[n] {
				if j != i && o.over(a) && o.pair(a, placed[j]) {
					moved = true
				}
			}
		}
	}
	return moved
}

// pair re-picks the orders of chains a and b at once (the first cheapest,
// keeping theirs on a tie) and says whether they changed.
func (o *orderCost) pair(a, b []int) bool {
	o.add(a, -1)
	o.add(b, -1)
	total := func(x, y []int) int {
		ha, ra := o.cost(x)
		o.add(x, 1)
		hb, rb := o.cost(y)
		o.add(x, -1)
		return headsFirst*(ha+hb) + ra + rb
	}
	bestCost := total(a, b)
	bestA, bestB := slices.Clone(a), slices.Clone(b)
	bufA, bufB := make([]int, len(a)), make([]int, len(b))
	orders(a, bufA, func(x []int) {
		hx, rx := o.cost(x)
		o.add(x, 1)
		orders(b, bufB, func(y []int) {
			if hy, ry := o.cost(y); headsFirst*(hx+hy)+rx+ry < bestCost {
				bestCost = headsFirst*(hx+hy) + rx + ry
				copy(bestA, x)
				copy(bestB, y)
			}
		})
		o.add(x, -1)
	})
	moved := !slices.Equal(bestA, a) || !slices.Equal(bestB, b)
	copy(a, bestA)
	copy(b, bestB)
	o.add(a, 1)
	o.add(b, 1)
	return moved
}

// descend re-picks every chain's order against all the others while that
// lowers the cost, for a bounded number of passes.
func (o *orderCost) descend(placed [][]int, hw int, keepHeads bool) {
	const passes = 32
	for pass, moved := 0, true; pass < passes && moved; pass++ {
		moved = false
		for _, c := range placed {
			o.add(c, -1)
			if o.arrange(c, hw, keepHeads) {
				moved = true
			}
			o.add(c, 1)
		}
	}
}
