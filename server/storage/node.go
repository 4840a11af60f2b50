package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/sluicefs/sluice/routing"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// NodeConfig configures a storage node. Zero fields take the defaults.
type NodeConfig struct {
	// Endpoint is the node's fabric endpoint. Required.
	Endpoint fabric.Endpoint
	// Routing says which chains the node's targets are in. Required.
	Routing routing.Provider
	// Targets are the node's targets. Required.
	Targets map[routing.TargetID]*Engine
	// Buffers and BufferSize make the budget for update data the node has
	// pulled and not yet stored and forwarded: Buffers x BufferSize bytes,
	// registered once (defaults 32 x 4 MiB). An update waits for a buffer;
	// a client can never make the node hold more than this.
	Buffers, BufferSize int
	// ForwardTimeout bounds one attempt to forward an update to a successor
	// before the node waits for new routing and tries again (default 5s).
	ForwardTimeout time.Duration
	// MaxReadBatch bounds the bytes one read request may ask for (default 64 MiB).
	MaxReadBatch int
	// OnSynced is called when this node has brought a syncing successor in
	// sync, against version chainVer of the chain, so that mgmtd can let it
	// serve (optional; mgmtd plugs in here).
	// An error (the report was refused or lost) has the resync run again.
	OnSynced func(chain routing.ChainID, target routing.TargetID, chainVer uint64) error
	// Ready, if set, says whether the node may serve at all: nil while it
	// holds a lease from mgmtd and its routing is as new as the lease's,
	// else an error wrapping ErrUnavailable. A node that was paused or cut
	// off past its lease thus neither serves nor acknowledges anything
	// until it has heard from mgmtd again and learned what changed.
	Ready func() error
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Node is a storage node: it serves its targets' chunks over fabric and
// replicates updates along chains with CRAQ. See the package doc.
type Node struct {
	cfg     NodeConfig
	ep      fabric.Endpoint
	routing routing.Provider
	log     *slog.Logger

	bufs   []byte
	mr     fabric.MR
	free   chan int
	chunks keyedMutex
	seen   *dedupe

	ctx     context.Context // ends with Close; owns the sync goroutines
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	syncMu  sync.Mutex
	syncing map[syncKey]bool
}

// NewNode starts serving cfg.Targets on cfg.Endpoint.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Endpoint == nil || cfg.Routing == nil || len(cfg.Targets) == 0 {
		return nil, errors.New("storage node: endpoint, routing and targets are required")
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = 32
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 4 << 20
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 5 * time.Second
	}
	if cfg.MaxReadBatch <= 0 {
		cfg.MaxReadBatch = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg, ep: cfg.Endpoint, routing: cfg.Routing, log: cfg.Logger.With("node", string(cfg.Endpoint.ID())),
		free: make(chan int, cfg.Buffers), seen: newDedupe(1 << 16)}
	n.bufs = make([]byte, cfg.Buffers*cfg.BufferSize)
	mr, err := n.ep.RegisterMemory(n.bufs, fabric.AccessRemoteRead)
	if err != nil {
		return nil, fmt.Errorf("storage node: register buffers: %w", err)
	}
	n.mr = mr
	for i := 0; i < cfg.Buffers; i++ {
		n.free <- i
	}
	fabric.Handle(n.ep, chunkio.MethodUpdate, n.update)
	fabric.Handle(n.ep, chunkio.MethodRead, n.read)
	fabric.Handle(n.ep, chunkio.MethodQuery, n.query)
	fabric.Handle(n.ep, chunkio.MethodRemove, n.remove)
	fabric.Handle(n.ep, MethodSyncList, n.syncList)
	fabric.Handle(n.ep, MethodSyncWrite, n.syncWrite)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.syncing = make(map[syncKey]bool)
	n.wg.Add(1)
	go n.watchRouting()
	return n, nil
}

// Close stops the node's background work and releases its buffers. The
// endpoint and engines are the caller's to close.
func (n *Node) Close() error {
	n.cancel()
	n.wg.Wait()
	return n.mr.Deregister()
}

// route checks that the node may serve, a request's chain version against
// the node's routing, and that target is one of this node's targets in the
// chain, and not one kept there while it was offline.
func (n *Node) route(chainID uint32, chainVer uint64, target uint32) (routing.Chain, *Engine, error) {
	if n.cfg.Ready != nil {
		if err := n.cfg.Ready(); err != nil {
			return routing.Chain{}, nil, fmt.Errorf("target %d: %w", target, err)
		}
	}
	r := n.routing.Routing()
	c, ok := r.Chains[routing.ChainID(chainID)]
	if !ok {
		return routing.Chain{}, nil, fmt.Errorf("%w: no chain %d", chunkio.ErrStaleChainVersion, chainID)
	}
	if c.Version != chainVer {
		return routing.Chain{}, nil, fmt.Errorf("chain %d at version %d, request has %d: %w", chainID, c.Version, chainVer, chunkio.ErrStaleChainVersion)
	}
	e := n.cfg.Targets[routing.TargetID(target)]
	if _, _, in := c.Position(routing.TargetID(target)); !in || e == nil {
		return routing.Chain{}, nil, fmt.Errorf("target %d not in chain %d v%d here: %w", target, chainID, chainVer, chunkio.ErrStaleChainVersion)
	}
	if c.State(routing.TargetID(target)) == routing.Offline {
		return routing.Chain{}, nil, fmt.Errorf("target %d is offline in chain %d: %w", target, chainID, chunkio.ErrUnavailable)
	}
	return c, e, nil
}

// chunkOf is a request's chunk, which it must name.
func chunkOf(p *storagepb.ChunkID) (chunkio.ID, error) {
	if p == nil {
		return chunkio.ID{}, fmt.Errorf("%w: no chunk named", fabric.ErrBadRequest)
	}
	return chunkio.FromProto(p), nil
}

func (n *Node) buffer(ctx context.Context) (int, []byte, error) {
	select {
	case i := <-n.free:
		return i, n.bufs[i*n.cfg.BufferSize : (i+1)*n.cfg.BufferSize], nil
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("waiting for an update buffer: %w", ctx.Err())
	}
}

// pull takes a buffer and pulls length bytes from src into it. The caller
// checks them against the update's CRC (store does, in the pass that
// checksums the blocks) and returns the buffer (n.free <- slot).
func (n *Node) pull(ctx context.Context, src *storagepb.RemoteBuf, length uint32) (int, []byte, error) {
	if int(length) > n.cfg.BufferSize || src.GetLen() != length {
		return 0, nil, fmt.Errorf("%d bytes (source %d): %w", length, src.GetLen(), chunkio.ErrTooLarge)
	}
	slot, buf, err := n.buffer(ctx)
	if err != nil {
		return 0, nil, err
	}
	data := buf[:length]
	rb := fabric.RemoteBuf{Node: fabric.NodeID(src.Node), Key: src.Key, Offset: src.Offset, Len: src.Len}
	if err := n.ep.Read(ctx, rb, data); err != nil {
		n.free <- slot
		return 0, nil, fmt.Errorf("pull: %w", err)
	}
	return slot, data, nil
}

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
	if req.UpdateVer == 0 {
		if chain.Targets[0] != routing.TargetID(req.Target) {
			return nil, fmt.Errorf("chain %d: target %d: %w", req.Chain, req.Target, chunkio.ErrNotHead)
		}
		if st := chain.State(routing.TargetID(req.Target)); st != routing.Serving {
			return nil, fmt.Errorf("chain %d: head %d is %v: %w", req.Chain, req.Target, st, chunkio.ErrUnavailable)
		}
		// A client's retry of an update already done gets the same answer.
		return n.seen.do(dedupeKey{req.Client, req.Seq}, func() (*storagepb.UpdateReply, error) {
			return n.apply(ctx, req)
		})
	}
	return n.apply(ctx, req)
}

// apply pulls the update's bytes, stores them as a pending version,
// forwards them down the chain and commits once the rest of the chain has.
func (n *Node) apply(ctx context.Context, req *storagepb.UpdateRequest) (*storagepb.UpdateReply, error) {
	slot, data, err := n.pull(ctx, req.Src, req.Length)
	if err != nil {
		return nil, fmt.Errorf("update of chunk %v: %w", req.Chunk, err)
	}
	defer func() { n.free <- slot }()
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
	// successors store (see the package doc for what is durable when).
	_, succ, _ := chain.Position(self)
	sr := storeRequest{id: id, ver: ver, off: req.Offset, data: data, full: req.FullChunk,
		chainVer: chain.Version, commit: succ == 0, want: &req.Crc, deferSync: true,
		chain: req.Chain, client: req.Client, seq: req.Seq}
	if req.UpdateVer != 0 {
		sr.wantVer = &req.VerCrc
	}
	v, finish, err := e.store(sr)
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
		fslot, fbuf, err := n.buffer(ctx)
		if err != nil {
			return nil, nil, err
		}
		got, _, err := e.ReadVersion(id, ver, 0, fbuf[:v.Length])
		if err != nil {
			n.free <- fslot
			return nil, nil, err
		}
		return &storagepb.UpdateRequest{
			Chain: req.Chain, Chunk: req.Chunk, Length: uint32(got), Crc: chunkio.CRC(fbuf[:got]),
			UpdateVer: ver, FullChunk: true, Src: n.remote(fslot, uint32(got)),
			Client: req.Client, Seq: req.Seq, VerCrc: v.Crc,
		}, func() { n.free <- fslot }, nil
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
func (n *Node) settlePending(ctx context.Context, chain routing.Chain, self routing.TargetID, e *Engine, id chunkio.ID) error {
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
	slot, buf, err := n.buffer(ctx)
	if err != nil {
		return err
	}
	defer func() { n.free <- slot }()
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
func (n *Node) settleAtTail(ctx context.Context, chain routing.Chain, self routing.TargetID, e *Engine, id chunkio.ID) (*storagepb.ChunkMeta, error) {
	unlock := n.chunks.lock(lockKey{self, id})
	defer unlock()
	if err := n.settlePending(ctx, chain, self, e, id); err != nil {
		return nil, fmt.Errorf("chunk %v: %w", id, err)
	}
	return e.Meta(id)
}

// remote names n bytes of buffer slot for a successor to pull.
func (n *Node) remote(slot int, length uint32) *storagepb.RemoteBuf {
	return &storagepb.RemoteBuf{Node: string(n.ep.ID()), Key: n.mr.Key(), Offset: uint64(slot * n.cfg.BufferSize), Len: length}
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

// read serves a batch of reads and pushes the bytes into the caller's
// buffers in one round trip.
func (n *Node) read(ctx context.Context, peer fabric.NodeID, req *storagepb.ReadRequest) (*storagepb.ReadReply, error) {
	total := 0
	for _, e := range req.Entries {
		total += int(e.Length)
	}
	if total > n.cfg.MaxReadBatch {
		return nil, fmt.Errorf("%w: read batch of %d bytes, limit %d", fabric.ErrBadRequest, total, n.cfg.MaxReadBatch)
	}
	// Bytes are pushed from views of the chunk files where they can be
	// (Engine.View), else copied into a pooled buffer, taken only then.
	var buf []byte
	var bp *[]byte
	defer func() {
		if bp != nil {
			readBuffers.Put(bp)
		}
	}()
	copyBuf := func(k uint32) []byte {
		if bp == nil {
			bp = readBuffers.Get().(*[]byte)
			if cap(*bp) < total {
				*bp = make([]byte, total)
			}
			buf = (*bp)[:total]
		}
		b := buf[:k:k]
		buf = buf[k:]
		return b
	}
	reply := &storagepb.ReadReply{Results: make([]*storagepb.ReadResult, len(req.Entries))}
	results := make([]storagepb.ReadResult, len(req.Entries))
	ops := make([]fabric.Op, 0, len(req.Entries))
	views := make([]int, 0, len(req.Entries)) // entries served from views
	dones := make([]func() bool, 0, len(req.Entries))
	for i, e := range req.Entries {
		res := &results[i]
		reply.Results[i] = res
		data, done, ver, crc, err := n.readEntry(ctx, e, req.FailIfDirty, copyBuf)
		if err != nil {
			res.Code, res.Error = uint32(fabric.CodeOf(err)), err.Error()
			continue
		}
		res.Length, res.Version, res.Crc = uint32(len(data)), ver, crc
		if done != nil {
			views, dones = append(views, i), append(dones, done)
		}
		if len(data) > 0 {
			ops = append(ops, fabric.Op{
				Remote: fabric.RemoteBuf{Node: peer, Key: e.DstKey, Offset: e.DstOffset, Len: uint32(len(data))},
				Local:  data,
			})
		}
	}
	err := n.ep.WriteBatch(ctx, ops)
	for k, done := range dones {
		if !done() {
			res := reply.Results[views[k]]
			err := fmt.Errorf("chunk %v: rewritten while being sent: %w", entryChunk(req.Entries[views[k]]), chunkio.ErrNotCommitted)
			*res = storagepb.ReadResult{Code: uint32(fabric.CodeOf(err)), Error: err.Error()}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("push read data: %w", err)
	}
	return reply, nil
}

func entryChunk(e *storagepb.ReadEntry) chunkio.ID { return chunkio.ID{Inode: e.Inode, Index: e.Index} }

// readBuffers recycles the buffers reads are copied into when they cannot
// be served from views.
var readBuffers = sync.Pool{New: func() any { return new([]byte) }}

// readEntry reads one entry's committed bytes (CRAQ: a dirty chunk is
// resolved by asking the tail which version is committed) and returns
// them with their CRC for the client to check. The bytes are a view of the
// chunk's file, with done to call once they are sent (see Engine.View),
// or, when the version cannot be viewed, copied into copyBuf(e.Length)
// (done is nil).
func (n *Node) readEntry(ctx context.Context, e *storagepb.ReadEntry, failIfDirty bool, copyBuf func(uint32) []byte) ([]byte, func() bool, uint64, uint32, error) {
	chain, eng, err := n.route(e.Chain, e.ChainVer, e.Target)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	self := routing.TargetID(e.Target)
	if st := chain.State(self); st != routing.Serving {
		return nil, nil, 0, 0, fmt.Errorf("target %d is %v in chain %d: %w", e.Target, st, e.Chain, chunkio.ErrUnavailable)
	}
	id := entryChunk(e)
	m, err := eng.Meta(id)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	ver := uint64(0)
	if p := m.GetPending(); p != nil {
		if failIfDirty {
			return nil, nil, 0, 0, fmt.Errorf("chunk %v: %w", id, chunkio.ErrNotCommitted)
		}
		if servingTail(chain) == self {
			if m, err = n.settleAtTail(ctx, chain, self, eng, id); err != nil {
				return nil, nil, 0, 0, err
			}
		} else {
			tailVer, tailCRC, err := n.queryTail(ctx, chain, id.Proto())
			if err != nil {
				return nil, nil, 0, 0, err
			}
			c := m.GetCommitted()
			switch {
			case tailVer == p.Ver && tailCRC == p.Crc:
				ver = p.Ver
			case tailVer == c.GetVer() && tailCRC == c.GetCrc():
			default:
				return nil, nil, 0, 0, fmt.Errorf("chunk %v: tail has version %d, here %d/%d: %w", id, tailVer, c.GetVer(), p.Ver, chunkio.ErrNotCommitted)
			}
		}
	}
	data, v, done, viewed, err := eng.View(id, ver, e.Offset, int(e.Length))
	if !viewed {
		data = copyBuf(e.Length)
		var got int
		got, v, err = eng.ReadVersion(id, ver, e.Offset, data)
		data = data[:got]
	}
	if errors.Is(err, chunkio.ErrNotFound) {
		return nil, nil, 0, 0, nil // never written: a hole (the CRC of nothing is 0)
	}
	if errors.Is(err, chunkio.ErrVersion) {
		// The version moved on (committed or replaced) since we looked.
		return nil, nil, 0, 0, fmt.Errorf("chunk %v: %w", id, chunkio.ErrNotCommitted)
	}
	if err != nil {
		return nil, nil, 0, 0, err
	}
	return data, done, v.Ver, RangeCRC(v, e.Offset, data), nil
}

// queryTail asks the chain's serving tail for its committed version of
// the chunk and that version's CRC.
func (n *Node) queryTail(ctx context.Context, c routing.Chain, chunk *storagepb.ChunkID) (uint64, uint32, error) {
	r := n.routing.Routing()
	tail := servingTail(c)
	node := r.Targets[tail].Node
	var resp storagepb.QueryReply
	err := n.ep.Call(ctx, node, chunkio.MethodQuery, &storagepb.QueryRequest{Chain: uint32(c.ID), ChainVer: c.Version, Chunk: chunk, Target: uint32(tail)}, &resp)
	if err != nil {
		return 0, 0, fmt.Errorf("ask tail %d: %w", tail, err)
	}
	return resp.CommitVer, resp.Crc, nil
}

// query answers for the chain's committed version of a chunk, as its tail.
func (n *Node) query(ctx context.Context, peer fabric.NodeID, req *storagepb.QueryRequest) (*storagepb.QueryReply, error) {
	id, err := chunkOf(req.Chunk)
	if err != nil {
		return nil, err
	}
	chain, e, err := n.route(req.Chain, req.ChainVer, req.Target)
	if err != nil {
		return nil, err
	}
	self := routing.TargetID(req.Target)
	if servingTail(chain) != self {
		return nil, fmt.Errorf("target %d is not chain %d's serving tail: %w", self, req.Chain, chunkio.ErrStaleChainVersion)
	}
	m, err := e.Meta(id)
	if err != nil {
		return nil, err
	}
	if m.GetPending() != nil {
		if m, err = n.settleAtTail(ctx, chain, self, e, id); err != nil {
			return nil, err
		}
	}
	return &storagepb.QueryReply{CommitVer: m.GetCommitted().GetVer(), Crc: m.GetCommitted().GetCrc()}, nil
}

// lockKey names one target's copy of a chunk.
type lockKey struct {
	target routing.TargetID
	chunk  chunkio.ID
}

// keyedMutex serializes work per key with no false sharing between keys
// (two targets of one chain may share a node).
type keyedMutex struct {
	mu    sync.Mutex
	locks map[lockKey]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key lockKey) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[lockKey]*keyedEntry)
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// dedupeKey is a client's update: its id and sequence number.
type dedupeKey struct{ client, seq uint64 }

// dedupe remembers the outcome of recent client updates so that a retry is
// answered, not applied twice; a retry that arrives while the first attempt
// runs waits for it. Failed attempts are forgotten so they can be retried.
type dedupe struct {
	mu    sync.Mutex
	max   int
	order []dedupeKey
	done  map[dedupeKey]*dedupeEntry
}

type dedupeEntry struct {
	ready chan struct{}
	reply *storagepb.UpdateReply
	err   error
}

func newDedupe(max int) *dedupe { return &dedupe{max: max, done: make(map[dedupeKey]*dedupeEntry)} }

func (d *dedupe) do(k dedupeKey, fn func() (*storagepb.UpdateReply, error)) (*storagepb.UpdateReply, error) {
	d.mu.Lock()
	if e := d.done[k]; e != nil {
		d.mu.Unlock()
		<-e.ready
		if e.err == nil {
			return e.reply, nil
		}
		return d.do(k, fn)
	}
	e := &dedupeEntry{ready: make(chan struct{})}
	d.done[k] = e
	d.order = append(d.order, k)
	for len(d.order) > d.max {
		delete(d.done, d.order[0])
		d.order = d.order[1:]
	}
	d.mu.Unlock()
	e.reply, e.err = fn()
	if e.err != nil {
		d.mu.Lock()
		if d.done[k] == e {
			delete(d.done, k)
		}
		d.mu.Unlock()
	}
	close(e.ready)
	return e.reply, e.err
}
