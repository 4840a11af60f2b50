package storage

import (
	"context"
	"sync"

	"github.com/sluicefs/sluice/routing"
)

// bufPool is a node's staging buffers for updates and resyncs. A request
// that holds a buffer while it waits for the next node of its chain takes
// one only while more than keep stay free, keep being how many nodes follow
// it (hopsAfter): a chain's last hop waits for no other node, so it always
// finishes once it has a buffer, and each hop before it can count on the
// buffers kept for the hops after it. Without that, nodes heading some
// chains and following in others could each fill their buffers with
// updates waiting for the next node's, and every update would wait for its
// deadline (a store-and-forward deadlock).
type bufPool struct {
	mu   sync.Mutex
	free []int
	wake chan struct{} // closed and replaced when a buffer comes back
}

func newBufPool(n int) *bufPool {
	p := &bufPool{wake: make(chan struct{})}
	for i := range n {
		p.free = append(p.free, i)
	}
	return p
}

// take returns a free buffer once more than keep are free, or ctx's error.
func (p *bufPool) take(ctx context.Context, keep int) (int, error) {
	for {
		p.mu.Lock()
		if len(p.free) > keep {
			// The buffer free longest: one just given back may still be
			// read by a forward whose caller stopped waiting for it.
			i := p.free[0]
			p.free = p.free[1:]
			p.mu.Unlock()
			return i, nil
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// put gives buffer i back.
func (p *bufPool) put(i int) {
	p.mu.Lock()
	p.free = append(p.free, i)
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// hopsAfter is how many of chain's targets follow self: what a request at
// self keeps free for them (at most buffers-1, so that a node with fewer
// buffers than a chain is long still takes updates at every position).
func hopsAfter(chain routing.Chain, self routing.TargetID, buffers int) int {
	i, _, ok := chain.Position(self)
	if !ok {
		return 0
	}
	return min(len(chain.Targets)-1-i, buffers-1)
}
