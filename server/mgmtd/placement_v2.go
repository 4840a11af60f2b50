package mgmtd

// orderEven is PlacementBalanced's ordering step, kept as it was so that
// tables made by it come out the same on replay: each chain's order, head
// first, so that every node heads (and ends) about as many chains as any
// other, and each replica's target from the node's targets with slots left.
func (p *placer) orderEven(placed [][]int) [][]uint32 {
	pos := make([][]int, len(p.nodeIDs))
	for n := range pos {
		pos[n] = make([]int, p.replicas)
	}
	for _, c := range placed {
		for k := range c {
			best := k
			for j := k + 1; j < len(c); j++ {
				if pos[c[j]][k] < pos[c[best]][k] || pos[c[j]][k] == pos[c[best]][k] && c[j] < c[best] {
					best = j
				}
			}
			c[k], c[best] = c[best], c[k]
			pos[c[k]][k]++
		}
	}
	p.balanceHeads(placed)
	for _, row := range pos {
		clear(row)
	}
	for _, c := range placed {
		for k, n := range c {
			pos[n][k]++
		}
	}
	// The greedy order leaves a few nodes one position off; swapping two
	// replicas' positions behind the head while that evens the counts fixes
	// most.
	for pass, moved := 0, true; pass < 16 && moved; pass++ {
		moved = false
		for _, c := range placed {
			for k := 1; k < len(c); k++ {
				for j := k + 1; j < len(c); j++ {
					a, b := pos[c[k]], pos[c[j]]
					// Moving a from k to j and b from j to k changes the
					// sum of squared counts by 2·(a[j]-a[k]+b[k]-b[j]+2).
					if a[j]-a[k]+b[k]-b[j]+2 < 0 {
						a[k]--
						a[j]++
						b[j]--
						b[k]++
						c[k], c[j] = c[j], c[k]
						moved = true
					}
				}
			}
		}
	}
	return p.targets(placed)
}
