package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// update handles an UpdateRequest: from a client at the head, or forwarded
// by a predecessor.
func (n *Node) update(ctx context.Context, peer fabric.NodeID, req *storagepb.UpdateRequest) (*storagepb.UpdateReply, error) {
	// A node pulls only from its caller's memory, as it pushes reads only
	// into its caller's: no one can make it move a third party's bytes.
	if src := req.Src.GetNode(); src != string(peer) {
		return nil, fmt.Errorf("%w: update from %s pulls from %q", fabric.ErrBadRequest, peer, src)
	}
	if _, err := chunkOf(req.Chunk); err != nil {
		return nil, err
	}
	chain, _, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	keep := hopsAfter(chain, routing.TargetID(req.Target), n.cfg.Buffers)
	if req.UpdateVer == 0 {
		if chain.Targets[0] != routing.TargetID(req.Target) {
			return nil, fmt.Errorf("chain %d: target %d: %w", req.Chain, req.Target, chunkio.ErrNotHead)
		}
		if st := chain.State(routing.TargetID(req.Target)); st != routing.Serving {
			return nil, fmt.Errorf("chain %d: head %d is %v: %w", req.Chain, req.Target, st, chunkio.ErrUnavailable)
		}
		// A client's retry of an update already done gets the same answer.
		return n.seen.do(dedupeKey{req.Client, req.Seq}, func() (*storagepb.UpdateReply, error) {
			return n.apply(ctx, req, keep)
		})
	}
	return n.apply(ctx, req, keep)
}

// apply pulls the update's bytes, stores them as a pending version,
// forwards them down the chain and commits once the rest of the chain has.
// Its staging buffers leave keep free for the hops after it (bufPool).
func (n *Node) apply(ctx context.Context, req *storagepb.UpdateRequest, keep int) (reply *storagepb.UpdateReply, err error) {
	t0 := time.Now()
	pending := n.m.pendingOf(req.Chain)
	pending.Inc()
	defer func() {
		pending.Dec()
		n.m.updated(req, err, t0)
	}()
	slot, data, err := n.pull(ctx, req.Src, req.Length, keep)
	if err != nil {
		return nil, fmt.Errorf("update of chunk %v: %w", req.Chunk, err)
	}
	defer func() { n.free.put(slot) }()
	id := chunkio.FromProto(req.Chunk)
	self := routing.TargetID(req.Target)
	unlock := n.chunks.lock(lockKey{self, id})
	defer unlock()
	chain, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	ver := req.UpdateVer
	if ver == 0 {
		if err := n.settlePending(ctx, chain, self, e, id); err != nil {
			return nil, fmt.Errorf("update of chunk %v: %w", id, err)
		}
		// A client's retry of an update the chain already applied (before
		// a restart, or at another head) gets its answer, not a second go.
		if req.Client != 0 {
			if v, ok, err := e.Applied(id, req.Client, req.Seq); err != nil {
				return nil, err
			} else if ok {
				m, err := e.Meta(id)
				if err != nil {
					return nil, err
				}
				return &storagepb.UpdateReply{CommitVer: v, ChunkLen: m.GetCommitted().GetLength()}, nil
			}
		}
		m, err := e.Meta(id)
		if err != nil {
			return nil, err
		}
		ver = m.GetCommitted().GetVer() + 1
	}
	// A tail commits as it stores; others store pending until their
	// successor has committed, and finish writing the data while the
	// successors store (see the chunkstore package doc for what is durable
	// when).
	_, succ, _ := chain.Position(self)
	sr := chunkstore.StoreRequest{ID: id, Ver: ver, Off: req.Offset, Data: data, Full: req.FullChunk,
		ChainVer: chain.Version, Commit: succ == 0, Want: &req.Crc, DeferSync: true,
		Chain: req.Chain, Client: req.Client, Seq: req.Seq}
	if req.UpdateVer != 0 {
		sr.WantVer = &req.VerCrc
	}
	v, finish, err := e.Store(sr)
	if errors.Is(err, chunkio.ErrVersion) {
		// Already committed here: a forward retried after it succeeded, or
		// a late copy of one. The same number must mean the same bytes.
		m, merr := e.Meta(id)
		if merr != nil {
			return nil, merr
		}
		c := m.GetCommitted()
		if c.GetVer() > ver || c.GetVer() == ver && c.GetCrc() == req.VerCrc {
			return &storagepb.UpdateReply{CommitVer: c.Ver, ChunkLen: c.Length}, nil
		}
		n.log.Error("chunk version committed here with other bytes than the head's", "chunk", id, "version", ver, "target", self)
		return nil, fmt.Errorf("chunk %v version %d committed at target %d with CRC %08x, the head's is %08x: %w", id, ver, self, c.GetCrc(), req.VerCrc, chunkio.ErrDiverged)
	}
	if err != nil {
		return nil, err
	}
	fwd := &storagepb.UpdateRequest{
		Chain: req.Chain, Chunk: req.Chunk, Offset: req.Offset, Length: req.Length, Crc: req.Crc,
		UpdateVer: ver, FullChunk: req.FullChunk, Src: n.remote(slot, req.Length),
		Client: req.Client, Seq: req.Seq, VerCrc: v.Crc,
	}
	full := func() (*storagepb.UpdateRequest, func(), error) {
		// A syncing successor may lack the base a patch applies to, and a
		// diverged one has another: they get the whole new version.
		fslot, fbuf, err := n.buffer(ctx, keep)
		if err != nil {
			return nil, nil, err
		}
		got, _, err := e.ReadVersion(id, ver, 0, fbuf[:v.Length])
		if err != nil {
			n.free.put(fslot)
			return nil, nil, err
		}
		return &storagepb.UpdateRequest{
			Chain: req.Chain, Chunk: req.Chunk, Length: uint32(got), Crc: chunkio.CRC(fbuf[:got]),
			UpdateVer: ver, FullChunk: true, Src: n.remote(fslot, uint32(got)),
			Client: req.Client, Seq: req.Seq, VerCrc: v.Crc,
		}, func() { n.free.put(fslot) }, nil
	}
	synced := make(chan error, 1)
	if finish != nil {
		go func() { synced <- finish() }()
	} else {
		synced <- nil
	}
	err = n.forward(ctx, self, fwd, full)
	if serr := <-synced; err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if _, err := e.Commit(id, ver); err != nil {
		return nil, err
	}
	return &storagepb.UpdateReply{CommitVer: ver, ChunkLen: v.Length}, nil
}

// settlePending finishes a pending version left by an update that did not
// finish here (its forward failed, or its reply was lost, perhaps after
// the successors committed it; or this node became its chain's tail while
// it was in flight): it sends the version down the chain again, whole, and
// commits it. Called with the chunk's lock held, by a chain's head before
// it numbers the next update (so that a number is never given to other
// bytes than a successor may hold under it) and by a node that must answer
// for the chain's committed version (a tail, a resync's source). The
// version was never acknowledged, so it may take effect now; a reader may
// even have seen it already, at a tail that then left the chain.
func (n *Node) settlePending(ctx context.Context, chain routing.Chain, self routing.TargetID, e *chunkstore.Engine, id chunkio.ID) error {
	m, err := e.Meta(id)
	if err != nil {
		return err
	}
	p := m.GetPending()
	if p == nil {
		return nil
	}
	if int(p.Length) > n.cfg.BufferSize {
		return fmt.Errorf("settle pending version %d of %d bytes: %w", p.Ver, p.Length, chunkio.ErrTooLarge)
	}
	slot, buf, err := n.buffer(ctx, hopsAfter(chain, self, n.cfg.Buffers))
	if err != nil {
		return err
	}
	defer func() { n.free.put(slot) }()
	got, _, err := e.ReadVersion(id, p.Ver, 0, buf[:p.Length])
	if errors.Is(err, chunkio.ErrChecksum) {
		// Torn (a power loss before its sync): it was never acknowledged,
		// and what it held is gone here; better given up than committed.
		n.log.Error("pending version unreadable; dropped", "chunk", id, "version", p.Ver, "target", self, "err", err)
		return e.Abort(id, p.Ver)
	}
	if err != nil {
		return fmt.Errorf("settle pending version %d: %w", p.Ver, err)
	}
	req := &storagepb.UpdateRequest{
		Chain: uint32(chain.ID), Chunk: id.Proto(), Length: uint32(got), Crc: chunkio.CRC(buf[:got]),
		UpdateVer: p.Ver, FullChunk: true, Src: n.remote(slot, uint32(got)),
		Client: p.Client, Seq: p.Seq, VerCrc: p.Crc,
	}
	if err := n.forward(ctx, self, req, nil); err != nil {
		return fmt.Errorf("settle pending version %d: %w", p.Ver, err)
	}
	if _, err := e.Commit(id, p.Ver); err != nil {
		return fmt.Errorf("settle pending version %d: %w", p.Ver, err)
	}
	n.log.Debug("settled a pending version", "chunk", id, "version", p.Ver, "target", self)
	return nil
}

// settleAtTail is settlePending, under the chunk's lock, for a node that
// is its chain's serving tail and finds a pending version: its committed
// version is the chain's, and the pending one may already have been
// committed (and read) at a tail that left.
func (n *Node) settleAtTail(ctx context.Context, chain routing.Chain, self routing.TargetID, e *chunkstore.Engine, id chunkio.ID) (*storagepb.ChunkMeta, error) {
	unlock := n.chunks.lock(lockKey{self, id})
	defer unlock()
	if err := n.settlePending(ctx, chain, self, e, id); err != nil {
		return nil, fmt.Errorf("chunk %v: %w", id, err)
	}
	return e.Meta(id)
}

// forward sends an update to target's successor in its chain, retrying
// against new routing when the successor fails, until the successor
// acknowledges or target is the tail. A syncing successor gets the update
// as a full chunk, built by full.
func (n *Node) forward(ctx context.Context, self routing.TargetID, req *storagepb.UpdateRequest, full func() (*storagepb.UpdateRequest, func(), error)) error {
	var fullReq *storagepb.UpdateRequest
	var releaseFull func()
	defer func() {
		if releaseFull != nil {
			releaseFull()
		}
	}()
	diverged := false
	return n.toSuccessor(ctx, self, routing.ChainID(req.Chain), func(ctx context.Context, c routing.Chain, succ routing.Target) error {
		send := req
		if (c.State(succ.ID) == routing.Syncing || diverged) && !req.FullChunk {
			if fullReq == nil {
				fr, release, err := full()
				if err != nil {
					return err
				}
				fullReq, releaseFull = fr, release
			}
			send = fullReq
		}
		send.ChainVer, send.Target = c.Version, uint32(succ.ID)
		var resp storagepb.UpdateReply
		err := n.ep.Call(ctx, succ.Node, chunkio.MethodUpdate, send, &resp)
		if errors.Is(err, chunkio.ErrDiverged) && !send.FullChunk {
			// The successor's base differs from ours: send the whole version.
			n.log.Warn("successor diverged; sending the whole chunk", "chain", req.Chain, "chunk", chunkio.FromProto(req.Chunk), "successor", succ.ID)
			diverged = true
			return fmt.Errorf("forward to target %d: %w", succ.ID, chunkio.ErrNotCommitted)
		}
		return err
	})
}

// toSuccessor runs send against self's successor in chain, retrying along
// new routing when it fails with something new routing may cure, until it
// succeeds or self is the tail (then there is nothing to send).
func (n *Node) toSuccessor(ctx context.Context, self routing.TargetID, chain routing.ChainID, send func(context.Context, routing.Chain, routing.Target) error) error {
	for {
		changed := n.routing.Changed()
		r := n.routing.Routing()
		c, ok := r.Chains[chain]
		_, succ, in := c.Position(self)
		if !ok || !in {
			return fmt.Errorf("target %d left chain %d: %w", self, chain, chunkio.ErrStaleChainVersion)
		}
		if succ == 0 {
			return nil
		}
		actx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
		err := send(actx, c, r.Targets[succ])
		cancel()
		if err == nil {
			return nil
		}
		if !chunkio.Retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("forward to target %d: %w", succ, err)
		}
		n.log.Debug("forward failed; waiting for routing", "chain", chain, "successor", succ, "err", err)
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("forward to target %d: %w", succ, ctx.Err())
		}
	}
}

// remove deletes a chunk along the chain: the rest of the chain first, so
// that the tail (whose copy reads trust) goes first, as with updates.
func (n *Node) remove(ctx context.Context, peer fabric.NodeID, req *storagepb.RemoveRequest) (*storagepb.RemoveReply, error) {
	id, err := chunkOf(req.Chunk)
	if err != nil {
		return nil, err
	}
	_, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	unlock := n.chunks.lock(lockKey{routing.TargetID(req.Target), id})
	defer unlock()
	err = n.toSuccessor(ctx, routing.TargetID(req.Target), routing.ChainID(req.Chain), func(ctx context.Context, c routing.Chain, succ routing.Target) error {
		fwd := &storagepb.RemoveRequest{Chain: req.Chain, ChainVer: c.Version, Target: uint32(succ.ID), Chunk: req.Chunk}
		var resp storagepb.RemoveReply
		return n.ep.Call(ctx, succ.Node, chunkio.MethodRemove, fwd, &resp)
	})
	if err != nil {
		return nil, err
	}
	return &storagepb.RemoveReply{}, e.Remove(id)
}
