package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"

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
	Targets map[routing.TargetID]*chunkstore.Engine
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
	// DropLeft, when positive, has the node remove its targets' chunks of
	// chains they have left for good (a replica move took them out) once
	// they have been out this long (left.go). Only for routing from
	// mgmtd's map, which says which chains each target belongs to.
	DropLeft time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when set, is where the node registers its metrics
	// (sluice_storage_*: reads, writes and bytes per target, latencies,
	// CRC failures, resyncs, chunks and disk space).
	Metrics prometheus.Registerer
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
	free   *bufPool
	chunks keyedMutex
	seen   *dedupe

	ctx     context.Context // ends with Close; owns the sync goroutines
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	syncMu  sync.Mutex
	syncing map[syncKey]bool
	dropMu  sync.RWMutex // a removal of a left chain's chunk (Lock), a resync's listing (RLock)

	m *metrics
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
		free: newBufPool(cfg.Buffers), seen: newDedupe(1 << 16), m: newMetrics(cfg.Metrics, cfg.Targets)}
	n.bufs = make([]byte, cfg.Buffers*cfg.BufferSize)
	mr, err := n.ep.RegisterMemory(n.bufs, fabric.AccessRemoteRead)
	if err != nil {
		return nil, fmt.Errorf("storage node: register buffers: %w", err)
	}
	n.mr = mr
	fabric.Handle(n.ep, chunkio.MethodUpdate, n.update)
	fabric.HandleReadOnly(n.ep, chunkio.MethodRead, n.read)
	fabric.Handle(n.ep, chunkio.MethodQuery, n.query)
	fabric.Handle(n.ep, chunkio.MethodRemove, n.remove)
	fabric.Handle(n.ep, MethodSyncList, n.syncList)
	fabric.Handle(n.ep, MethodSyncWrite, n.syncWrite)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.syncing = make(map[syncKey]bool)
	n.wg.Add(1)
	go n.watchRouting()
	if cfg.DropLeft > 0 {
		n.wg.Add(1)
		go n.dropLeftLoop()
	}
	return n, nil
}

// Close stops the node's background work and releases its buffers. The
// endpoint and engines are the caller's to close.
func (n *Node) Close() error {
	n.cancel()
	n.wg.Wait()
	return n.mr.Deregister()
}

// ready says whether the node may serve at all (NodeConfig.Ready).
func (n *Node) ready() error {
	if n.cfg.Ready == nil {
		return nil
	}
	if err := n.cfg.Ready(); err != nil {
		return fmt.Errorf("node %s: %w", n.ep.ID(), err)
	}
	return nil
}

// route checks that the node may serve, a request's chain version against
// the node's routing, and that target is one of this node's targets in the
// chain, and not one kept there while it was offline.
func (n *Node) route(chainID uint32, chainVer uint64, target uint32) (routing.Chain, *chunkstore.Engine, error) {
	if err := n.ready(); err != nil {
		return routing.Chain{}, nil, err
	}
	return n.routeReady(chainID, chainVer, target)
}

// routeReady is route for a request whose handler checked ready (a batch
// checks once, not per entry).
func (n *Node) routeReady(chainID uint32, chainVer uint64, target uint32) (routing.Chain, *chunkstore.Engine, error) {
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

// buffer takes a staging buffer, leaving keep free for the hops after the
// caller's (see bufPool).
func (n *Node) buffer(ctx context.Context, keep int) (int, []byte, error) {
	i, err := n.free.take(ctx, keep)
	if err != nil {
		return 0, nil, fmt.Errorf("waiting for an update buffer: %w", err)
	}
	return i, n.bufs[i*n.cfg.BufferSize : (i+1)*n.cfg.BufferSize], nil
}

// pull takes a buffer and pulls length bytes from src into it. The caller
// checks them against the update's CRC (Engine.Store does, in the pass that
// checksums the blocks) and returns the buffer (n.free.put(slot)); keep
// is buffer's.
func (n *Node) pull(ctx context.Context, src *storagepb.RemoteBuf, length uint32, keep int) (int, []byte, error) {
	if int(length) > n.cfg.BufferSize || src.GetLen() != length {
		return 0, nil, fmt.Errorf("%d bytes (source %d): %w", length, src.GetLen(), chunkio.ErrTooLarge)
	}
	slot, buf, err := n.buffer(ctx, keep)
	if err != nil {
		return 0, nil, err
	}
	data := buf[:length]
	rb := fabric.RemoteBuf{Node: fabric.NodeID(src.Node), Key: src.Key, Offset: src.Offset, Len: src.Len}
	if err := n.ep.Read(ctx, rb, data); err != nil {
		n.free.put(slot)
		return 0, nil, fmt.Errorf("pull: %w", err)
	}
	return slot, data, nil
}

// remote names n bytes of buffer slot for a successor to pull.
func (n *Node) remote(slot int, length uint32) *storagepb.RemoteBuf {
	return &storagepb.RemoteBuf{Node: string(n.ep.ID()), Key: n.mr.Key(), Offset: uint64(slot * n.cfg.BufferSize), Len: length}
}
