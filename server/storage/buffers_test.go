package storage

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric/fabrictest"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// TestNoBufferDeadlockAcrossChains: three nodes each head one chain and
// follow in the others, with as few staging buffers as a chain is long,
// and many writers at once. Every node's buffers once filled up with
// updates waiting for the next node's, until forwards timed out and
// clients retried (240 writes took 33 s, against under a second); with
// buffers kept for the later hops no forward waits out its timeout.
func TestNoBufferDeadlockAcrossChains(t *testing.T) {
	chains := map[routing.ChainID][]routing.TargetID{1: {1, 2, 3}, 2: {2, 3, 1}, 3: {3, 1, 2}}
	// Forwards may take their time (a loaded machine's syncs), so that one
	// timing out means a cycle of waits, not a slow disk.
	c := newChainsWith(t, 3, chains, chunkstore.EngineConfig{}, func(nc *NodeConfig) {
		nc.Buffers, nc.ForwardTimeout = 3, 5*time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data := fabrictest.RandBytes(1, 256<<10)
	var wg sync.WaitGroup
	var failed, retried atomic.Int64
	var first atomic.Value
	t0 := time.Now()
	const writers, each = 24, 10
	for w := range writers {
		cl := c.client(fmt.Sprintf("writer-%d", w))
		cl.AttemptTimeout = 20 * time.Second
		cl.OnRetry = func(error) { retried.Add(1) }
		wg.Go(func() {
			for i := range each {
				chain := routing.ChainID(1 + (w+i)%3)
				if _, err := cl.writeIn(ctx, chain, chunkio.ID{Inode: uint64(100 + w), Index: uint32(i)}, 0, data, true); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if n, r := failed.Load(), retried.Load(); n > 0 || r > 0 {
		t.Fatalf("%d of %d writes failed and %d attempts were retried (a forward waited out its timeout) in %v; the first failure: %v",
			n, writers*each, r, time.Since(t0), first.Load())
	}
	t.Logf("%d writes in %v", writers*each, time.Since(t0).Round(time.Millisecond))
}

func TestBufPoolKeepsForLaterHops(t *testing.T) {
	p := newBufPool(3)
	ctx := context.Background()
	a, _ := p.take(ctx, 2) // a head: all three free
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.take(short, 2); err == nil {
		t.Fatal("a second head took a buffer kept for the hops after it")
	}
	b, err := p.take(ctx, 1) // a middle: two free
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.take(short, 1); err == nil {
		t.Fatal("a second middle took the buffer kept for the tail")
	}
	c, err := p.take(ctx, 0) // the tail takes the last
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() { i, _ := p.take(ctx, 0); done <- i }()
	p.put(c)
	if got := <-done; got != c {
		t.Fatalf("a waiter got buffer %d, want the one put back (%d), the only one free", got, c)
	}
	p.put(a)
	p.put(b)
	if hopsAfter(routing.Chain{Targets: []routing.TargetID{4, 5, 6}}, 4, 16) != 2 || hopsAfter(routing.Chain{Targets: []routing.TargetID{4, 5, 6}}, 6, 16) != 0 ||
		hopsAfter(routing.Chain{Targets: []routing.TargetID{4, 5, 6}}, 4, 2) != 1 {
		t.Fatal("hopsAfter")
	}
}
