package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// Resync. A target that comes back (or restarts) joins its chain's end as
// syncing in that chain: it takes writes (from its predecessor, as full
// chunks, since it may lack the base a patch applies to) but serves no
// reads. Its predecessor walks its own chunks of that chain (a chunk's
// record names its chain), compares each with the syncing target's
// version and CRC, and replaces whatever differs with its committed
// version, holding the chunk's lock so that a concurrent update is either
// before the copy or forwarded after it. Chunks of the chain the syncing
// target has and the predecessor does not were removed meanwhile, and are
// removed there too; chunks of other chains are never touched. Then the
// predecessor reports OnSynced with the chain's version, and mgmtd lets
// the target serve in that chain unless the chain changed meanwhile.

const (
	MethodSyncList  = "storage.SyncList"
	MethodSyncWrite = "storage.SyncWrite"
)

type syncKey struct {
	chain  routing.ChainID
	target routing.TargetID
}

// servingTail is the last serving target of c: the one whose committed
// versions are the chain's (a syncing target after it may lag).
func servingTail(c routing.Chain) routing.TargetID {
	if s := c.Serving(); len(s) > 0 {
		return s[len(s)-1]
	}
	return c.Tail()
}

// watchRouting starts a resync whenever one of this node's targets is the
// predecessor of a syncing target.
func (n *Node) watchRouting() {
	defer n.wg.Done()
	for {
		changed := n.routing.Changed()
		r := n.routing.Routing()
		for _, c := range r.Chains {
			for i := 1; i < len(c.Targets); i++ {
				succ, pred := c.Targets[i], c.Targets[i-1]
				if c.State(succ) != routing.Syncing || n.cfg.Targets[pred] == nil || c.State(pred) != routing.Serving {
					continue
				}
				n.startSync(c.ID, pred, succ)
			}
		}
		select {
		case <-changed:
		case <-n.ctx.Done():
			return
		}
	}
}

func (n *Node) startSync(chain routing.ChainID, self, succ routing.TargetID) {
	k := syncKey{chain, succ}
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	if n.syncing[k] {
		return
	}
	n.syncing[k] = true
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			n.syncMu.Lock()
			delete(n.syncing, k)
			n.syncMu.Unlock()
		}()
		n.m.resyncs.Inc()
		defer n.m.resyncs.Dec()
		for n.ctx.Err() == nil {
			chainVer, err := n.syncTarget(n.ctx, chain, self, succ)
			if err == nil && n.cfg.OnSynced != nil {
				err = n.cfg.OnSynced(chain, succ, chainVer)
			}
			if err == nil {
				return
			}
			if errors.Is(err, errSyncNotNeeded) {
				return
			}
			n.log.Warn("resync failed; retrying", "chain", chain, "target", succ, "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-n.ctx.Done():
			}
		}
	}()
}

var errSyncNotNeeded = errors.New("target no longer syncing behind us")

// syncTarget brings succ in line with self's committed chunks of the
// chain, and returns the chain's version it did so at.
func (n *Node) syncTarget(ctx context.Context, chainID routing.ChainID, self, succ routing.TargetID) (uint64, error) {
	chain, node, err := n.syncRoute(chainID, self, succ)
	if err != nil {
		return 0, err
	}
	theirs := map[chunkio.ID]*storagepb.SyncEntry{}
	var after *storagepb.ChunkID
	for {
		var page storagepb.SyncListReply
		req := &storagepb.SyncListRequest{Chain: uint32(chainID), ChainVer: chain.Version, Target: uint32(succ), After: after, Limit: 4096}
		if err := n.ep.Call(ctx, node, MethodSyncList, req, &page); err != nil {
			return 0, fmt.Errorf("list target %d: %w", succ, err)
		}
		for _, e := range page.Entries {
			theirs[chunkio.FromProto(e.Chunk)] = e
			after = e.Chunk
		}
		if !page.More {
			break
		}
	}
	var ids []chunkio.ID
	if err := n.cfg.Targets[self].Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		if m.Chain == uint32(chainID) {
			ids = append(ids, id)
		}
		return true
	}); err != nil {
		return 0, err
	}
	for _, id := range ids {
		if err := n.syncChunk(ctx, chainID, self, succ, id, theirs[id]); err != nil {
			return 0, err
		}
		delete(theirs, id)
	}
	for id := range theirs {
		if err := n.syncChunk(ctx, chainID, self, succ, id, theirs[id]); err != nil {
			return 0, err
		}
	}
	// The report names the version synced at; a chain that changed meanwhile
	// is synced again (mgmtd would refuse the report).
	now, _, err := n.syncRoute(chainID, self, succ)
	if err != nil {
		return 0, err
	}
	if now.Version != chain.Version {
		return 0, fmt.Errorf("chain %d moved from version %d to %d during the resync of target %d: %w", chainID, chain.Version, now.Version, succ, chunkio.ErrStaleChainVersion)
	}
	return chain.Version, nil
}

// syncRoute checks that succ still syncs right behind self.
func (n *Node) syncRoute(chainID routing.ChainID, self, succ routing.TargetID) (routing.Chain, fabric.NodeID, error) {
	r := n.routing.Routing()
	c := r.Chains[chainID]
	i := slices.Index(c.Targets, self)
	if i < 0 || i+1 >= len(c.Targets) || c.Targets[i+1] != succ || c.State(succ) != routing.Syncing || c.State(self) != routing.Serving {
		return routing.Chain{}, "", errSyncNotNeeded
	}
	return c, r.Targets[succ].Node, nil
}

// syncChunk makes succ's copy of id match self's committed version (or
// removes it), under the chunk's lock.
func (n *Node) syncChunk(ctx context.Context, chainID routing.ChainID, self, succ routing.TargetID, id chunkio.ID, theirs *storagepb.SyncEntry) error {
	unlock := n.chunks.lock(lockKey{self, id})
	defer unlock()
	chain, node, err := n.syncRoute(chainID, self, succ)
	if err != nil {
		return err
	}
	e := n.cfg.Targets[self]
	m, err := e.Meta(id)
	if err != nil {
		return err
	}
	if m.GetPending() != nil && servingTail(chain) == self {
		// The chain's committed version is ours to give: a pending one
		// left over may have been committed at a tail that left.
		if err := n.settlePending(ctx, chain, self, e, id); err != nil {
			return fmt.Errorf("sync chunk %v: %w", id, err)
		}
		if m, err = e.Meta(id); err != nil {
			return err
		}
	}
	mine := m.GetCommitted()
	req := &storagepb.SyncWriteRequest{Chain: uint32(chainID), ChainVer: chain.Version, Target: uint32(succ), Chunk: id.Proto()}
	switch {
	case mine == nil && theirs == nil:
		return nil
	case mine == nil:
		req.Remove = true
	case theirs != nil && theirs.Ver == mine.Ver && theirs.Crc == mine.Crc && !theirs.Pending:
		return nil
	default:
		// The successor pulls into one of its own buffers meanwhile.
		slot, buf, err := n.buffer(ctx, min(1, n.cfg.Buffers-1))
		if err != nil {
			return err
		}
		defer func() { n.free.put(slot) }()
		got, v, err := e.Read(id, 0, buf[:mine.Length])
		if err != nil {
			return err
		}
		req.Ver, req.Length, req.Crc, req.Src = v.Ver, uint32(got), chunkio.CRC(buf[:got]), n.remote(slot, uint32(got))
		req.Applied = m.Applied
	}
	var resp storagepb.SyncWriteReply
	if err := n.ep.Call(ctx, node, MethodSyncWrite, req, &resp); err != nil {
		return fmt.Errorf("sync chunk %v to target %d: %w", id, succ, err)
	}
	n.m.resyncBytes.Add(float64(req.Length))
	return nil
}

// syncList serves a page of a target's chunk versions.
func (n *Node) syncList(ctx context.Context, peer fabric.NodeID, req *storagepb.SyncListRequest) (*storagepb.SyncListReply, error) {
	_, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	limit := int(min(max(req.Limit, 1), 4096))
	reply := &storagepb.SyncListReply{}
	n.dropMu.RLock() // see left.go
	defer n.dropMu.RUnlock()
	var after *chunkio.ID
	if req.After != nil {
		a := chunkio.FromProto(req.After)
		after = &a
	}
	err = e.Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		if after != nil && (id.Inode < after.Inode || id.Inode == after.Inode && id.Index <= after.Index) {
			return true
		}
		if m.Chain != req.Chain {
			return true // another chain's: not this resync's business
		}
		if len(reply.Entries) == limit {
			reply.More = true
			return false
		}
		reply.Entries = append(reply.Entries, &storagepb.SyncEntry{Chunk: id.Proto(), Ver: m.GetCommitted().GetVer(), Crc: m.GetCommitted().GetCrc(),
			Pending: m.Pending != nil})
		return true
	})
	return reply, err
}

// syncWrite applies a predecessor's full-chunk replacement.
func (n *Node) syncWrite(ctx context.Context, peer fabric.NodeID, req *storagepb.SyncWriteRequest) (*storagepb.SyncWriteReply, error) {
	id, err := chunkOf(req.Chunk)
	if err != nil {
		return nil, err
	}
	_, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	if req.Remove {
		if m, err := e.Meta(id); err != nil || m.Chain != req.Chain {
			return &storagepb.SyncWriteReply{}, err // not this chain's chunk: left alone
		}
		unlock := n.chunks.lock(lockKey{routing.TargetID(req.Target), id})
		defer unlock()
		return &storagepb.SyncWriteReply{}, e.Remove(id)
	}
	slot, data, err := n.pull(ctx, req.Src, req.Length, 0) // the last hop: it waits for no one
	if err != nil {
		return nil, fmt.Errorf("sync of chunk %v: %w", id, err)
	}
	defer func() { n.free.put(slot) }()
	if chunkio.CRC(data) != req.Crc {
		return nil, fmt.Errorf("sync of chunk %v: pulled bytes: %w", id, chunkio.ErrChecksum)
	}
	unlock := n.chunks.lock(lockKey{routing.TargetID(req.Target), id})
	defer unlock()
	return &storagepb.SyncWriteReply{}, e.Replace(id, req.Chain, req.Ver, data, req.Applied)
}
