package storage

import (
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// chunksOf counts e's chunks of chain.
func chunksOf(t *testing.T, e *chunkstore.Engine, chain routing.ChainID) int {
	t.Helper()
	n := 0
	if err := e.Chunks(func(_ chunkio.ID, m *storagepb.ChunkMeta) bool {
		if m.Chain == uint32(chain) {
			n++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDropLeft: a target a move took out of a chain for good loses its
// chunks of that chain after DropLeft; one out of the chain only while
// offline (it still belongs to it) keeps them, as do the chain's members.
func TestDropLeft(t *testing.T) {
	c := newChainsWith(t, 4, map[routing.ChainID][]routing.TargetID{testChain: {1, 2, 3}}, chunkstore.EngineConfig{},
		func(nc *NodeConfig) { nc.DropLeft = 50 * time.Millisecond })
	c.routing.Update(func(r *routing.Routing) {
		for id, tg := range r.Targets {
			tg.Chains = []routing.ChainID{}
			if id != 4 {
				tg.Chains = []routing.ChainID{testChain}
			}
			r.Targets[id] = tg
		}
	})
	cl := c.client("client")
	ctx := ctxT(t, 10*time.Second)
	for i := range 3 {
		if _, err := cl.write(ctx, chunkio.ID{Inode: 7, Index: uint32(i)}, 0, []byte("kept elsewhere"), true); err != nil {
			t.Fatal(err)
		}
	}
	// Target 1 is moved out (target 4 took its place); target 2 leaves
	// while offline, still belonging to the chain.
	c.routing.Update(func(r *routing.Routing) {
		r.Chains[testChain] = routing.Chain{ID: testChain, Version: 5, Targets: []routing.TargetID{3, 4}, States: []routing.TargetState{routing.Serving, routing.Serving}}
		t1, t4 := r.Targets[1], r.Targets[4]
		t1.Chains, t4.Chains = []routing.ChainID{}, []routing.ChainID{testChain}
		r.Targets[1], r.Targets[4] = t1, t4
	})
	deadline := time.Now().Add(5 * time.Second)
	for chunksOf(t, c.engines[0], testChain) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("target 1 still holds %d chunks of the chain it left", chunksOf(t, c.engines[0], testChain))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // DropLeft six times over
	if n2, n3 := chunksOf(t, c.engines[1], testChain), chunksOf(t, c.engines[2], testChain); n2 != 3 || n3 != 3 {
		t.Fatalf("chunks of the chain: target 2 (out while offline) %d, target 3 (a member) %d; want 3 each", n2, n3)
	}
}
