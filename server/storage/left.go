package storage

import (
	"slices"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/routing"
)

// Chunks of chains a target has left. A replica move (a drain, a
// rebalance) takes a target out of a chain for good once its replacement
// serves; the chunks it kept of that chain are then nobody's, and their
// space should go back to the target. A target has left chain C when the
// routing from mgmtd neither has it in C nor lists C among the chains it
// belongs to (a target out of a chain only while offline still belongs to
// it, and keeps its chunks to be resynced from). The node removes such
// chunks once the target has been out of the chain for NodeConfig.DropLeft
// on end, a chunk at a time, each under the chunk's lock and after looking
// at the routing again: a move may bring the target back into the chain
// meanwhile, and then the chunk is the resync's to judge.
//
// The one race that the chunk lock does not cover is a resync listing the
// target's chunks (SyncList) just as one is removed: the predecessor would
// take the removed chunk as present and never copy it. dropMu orders the
// two: a removal looks at the routing and removes under it, a listing
// reads under it, so a listing made once the target is back in the chain
// sees every removal that will ever happen to it.

// dropLeftLoop looks for left chains every quarter of DropLeft (at most
// once a minute) until the node closes.
func (n *Node) dropLeftLoop() {
	defer n.wg.Done()
	since := map[syncKey]time.Time{}
	var seen uint64 // the routing version last looked at
	every := min(max(n.cfg.DropLeft/4, 100*time.Millisecond), time.Minute)
	tick.Every(n.ctx, every, func() {
		// Walking the targets' chunks is work: only when the routing
		// changed since, or a left chain waits for its time.
		if v := n.routing.Routing().Version; v != seen || len(since) > 0 {
			if n.dropLeft(since, time.Now()) {
				seen = v
			}
		}
	})
}

// hasLeft reports whether target has left chain in routing r.
func hasLeft(r *routing.Routing, chain routing.ChainID, target routing.TargetID) bool {
	c, ok := r.Chains[chain]
	t, known := r.Targets[target]
	return ok && known && t.Chains != nil && !slices.Contains(t.Chains, chain) && !slices.Contains(c.Targets, target)
}

// dropLeft notes, in since, when each of the node's targets was first seen
// out of each chain it holds chunks of, and removes the chunks of those
// out for DropLeft. It reports whether it looked (false: not ready).
func (n *Node) dropLeft(since map[syncKey]time.Time, now time.Time) bool {
	if n.ready() != nil {
		return false // without a lease, the routing may be old
	}
	r := n.routing.Routing()
	left := map[syncKey]bool{}
	for id, e := range n.cfg.Targets {
		chains := map[routing.ChainID]bool{}
		e.Chunks(func(_ chunkio.ID, m *storagepb.ChunkMeta) bool {
			chains[routing.ChainID(m.Chain)] = true
			return true
		})
		for c := range chains {
			if hasLeft(r, c, id) {
				k := syncKey{c, id}
				left[k] = true
				if _, ok := since[k]; !ok {
					since[k] = now
				}
			}
		}
	}
	for k, t0 := range since {
		switch {
		case !left[k]:
			delete(since, k)
		case now.Sub(t0) >= n.cfg.DropLeft:
			if got := n.dropChain(k.chain, k.target); got > 0 {
				n.log.Info("removed the chunks of a chain the target left", "target", k.target, "chain", k.chain, "chunks", got)
			}
			delete(since, k)
		}
	}
	return true
}

// dropChain removes target's chunks of chain while the target stays out
// of it, and returns how many it removed.
func (n *Node) dropChain(chain routing.ChainID, target routing.TargetID) int {
	e := n.cfg.Targets[target]
	var ids []chunkio.ID
	e.Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		if m.Chain == uint32(chain) {
			ids = append(ids, id)
		}
		return true
	})
	removed := 0
	for _, id := range ids {
		if n.ctx.Err() != nil || !n.dropChunk(chain, target, id) {
			break
		}
		removed++
	}
	return removed
}

// dropChunk removes one chunk if target is still out of chain; it reports
// false when the target is back.
func (n *Node) dropChunk(chain routing.ChainID, target routing.TargetID, id chunkio.ID) bool {
	n.dropMu.Lock()
	defer n.dropMu.Unlock()
	unlock := n.chunks.lock(lockKey{target, id})
	defer unlock()
	if n.ready() != nil || !hasLeft(n.routing.Routing(), chain, target) {
		return false
	}
	e := n.cfg.Targets[target]
	if m, err := e.Meta(id); err != nil || m.Chain != uint32(chain) {
		return true // gone already, or another chain's now
	}
	if err := e.Remove(id); err != nil {
		n.log.Warn("cannot remove a chunk of a chain the target left", "target", target, "chain", chain, "chunk", id, "err", err)
		return false
	}
	return true
}
