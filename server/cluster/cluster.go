// Package cluster runs Sluice's processes: the control plane (a replica of
// the metadata group with the failure detector, the chunk collector and the
// gRPC services) and storage nodes (targets in local directories, each a
// storage node on its own TCP fabric endpoint, with an mgmtd agent). Start
// runs a whole cluster in one process — what `sluice dev` runs and SDK tests
// run against; StartControl and StartStorage are the pieces `sluice server`
// runs as separate processes. Restarting on the same directory keeps the
// data and the token.
//
// Inside one process the pieces also share a fabric/local network: each
// storage endpoint is attached to it, so storage nodes forward along chains
// to each other, and clients made on [Cluster.Fabric] read and write, by
// memory copy, while clients in other processes use TCP.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicefs/sluice/auth"
	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/local"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
	"github.com/sluicefs/sluice/rpc"
	"github.com/sluicefs/sluice/server/chunkstore"
	"github.com/sluicefs/sluice/server/gateway"
	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/mgmtd"
	"github.com/sluicefs/sluice/server/storage"
)

func quiet(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// ControlConfig configures a control-plane replica.
type ControlConfig struct {
	Dir      string // the replica's Raft log, snapshots and state
	ID       string // the replica's name in the group (default "meta")
	RaftBind string // Raft's TCP address (default 127.0.0.1:0)
	Listen   string // gRPC for clients and storage nodes (default 127.0.0.1:0)
	Token    string
	// Members bootstraps a new group (ID -> Raft address, this replica
	// included); empty means a group of this replica alone.
	Members map[string]string
	// The root directory's layout: chunk size and stripe.
	ChunkSize, Stripe int
	// Once ExpectTargets targets have registered and no chain table exists,
	// the leader creates table 1: one chain per target, Replicas long.
	ExpectTargets, Replicas int
	// Local, when set, is the network of storage nodes in this process;
	// the collector reaches them on it.
	Local *local.Network
	// CollectDelay is how long an unlinked file's chunks stay before the
	// collector removes them (default 1 minute).
	CollectDelay time.Duration
	// CollectInterval is how often the collector walks its queue (default
	// CollectDelay, within 1 to 10 seconds).
	CollectInterval time.Duration
	// CollectWorkers is how many files the collector removes at once
	// (default 8).
	CollectWorkers int
	// ElectionWait is how long a new leader acts on none of the state
	// clients renew in its memory: it collects nothing (read leases) and
	// grants no file lock (held locks) until they have reached it
	// (default fsmeta.ReadLease; negative: none, for a test whose clients
	// all start with the cluster).
	ElectionWait time.Duration
	// ClientLease is how long a client may go without renewing before the
	// collector ends its write sessions (meta.CollectorConfig; default
	// fsmeta.ReadLease). Shorter only for tests whose clients renew faster.
	ClientLease time.Duration
	// SnapshotEvery is how many log entries the replica applies between
	// snapshots of the namespace (meta.ReplicaConfig; default 8192).
	SnapshotEvery uint64
	// InlineMax is the largest file the metadata service keeps inline,
	// its bytes in the metadata store instead of chunks (default
	// meta.DefaultInlineMax; negative: none).
	InlineMax int
	// Moves throttles replica moves (drain, rebalance); its Logger is
	// Logger.
	Moves  mgmtd.PlannerConfig
	Logger *slog.Logger
}

// Control is a running control-plane replica.
type Control struct {
	Addr      string
	replica   *meta.Replica
	collector atomic.Pointer[meta.Collector] // once its storage client is up
	closeOnce sync.Once
	gs        *grpc.Server
	metrics   *meta.Metrics
	bg        context.Context // ends with Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// StartControl starts a control-plane replica.
func StartControl(ctx context.Context, cfg ControlConfig) (*Control, error) {
	if cfg.ID == "" {
		cfg.ID = "meta"
	}
	if cfg.RaftBind == "" {
		cfg.RaftBind = "127.0.0.1:0"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 1 << 20
	}
	if cfg.CollectDelay <= 0 {
		cfg.CollectDelay = time.Minute
	}
	if cfg.CollectInterval <= 0 {
		cfg.CollectInterval = min(10*time.Second, max(cfg.CollectDelay, time.Second))
	}
	cfg.Logger = quiet(cfg.Logger)
	c := &Control{}
	bg, cancel := context.WithCancel(context.Background())
	c.bg, c.cancel = bg, cancel
	fail := func(err error) (*Control, error) {
		c.Close()
		return nil, err
	}
	var err error
	c.replica, err = meta.StartReplica(meta.ReplicaConfig{ID: cfg.ID, Dir: cfg.Dir, Bind: cfg.RaftBind,
		RootLayout: &metapb.Layout{ChainTable: 1, ChunkSize: uint32(cfg.ChunkSize), Stripe: uint32(cfg.Stripe)}, Fast: true,
		SnapshotEvery: cfg.SnapshotEvery, Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	members := cfg.Members
	if len(members) == 0 {
		members = map[string]string{cfg.ID: c.replica.Addr()}
	}
	if err := c.replica.Bootstrap(members); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fail(err)
	}
	det := mgmtd.NewDetector(c.replica, 3*time.Second, cfg.Logger)
	c.spawn(func() { det.Run(bg) })
	moves := cfg.Moves
	moves.Logger = cfg.Logger
	planner := mgmtd.NewPlanner(c.replica, moves)
	c.spawn(func() { planner.Run(bg) })
	c.metrics = meta.NewMetrics(c.replica)
	if err := c.metrics.Register(det.Metrics()...); err != nil {
		return fail(err)
	}
	unary, stream := auth.TokenAuth(cfg.Token)
	// Stream workers: a fixed set of goroutines serves the requests, so
	// a metadata call runs on a stack already grown for the namespace's
	// reads instead of growing a new goroutine's (a sixth of a stat's CPU).
	c.gs = grpc.NewServer(grpc.ChainUnaryInterceptor(unary, c.metrics.Interceptor()), grpc.StreamInterceptor(stream),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	metaSvc := meta.NewService(c.replica)
	metaSvc.ReportSpace(det.TargetSpace)
	if cfg.ElectionWait != 0 {
		metaSvc.SetElectionWait(cfg.ElectionWait)
	}
	if cfg.InlineMax != 0 {
		metaSvc.SetInlineMax(cfg.InlineMax)
	}
	metapb.RegisterMetaServer(c.gs, metaSvc)
	mgmtdpb.RegisterMgmtdServer(c.gs, mgmtd.NewService(c.replica, det))
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fail(fmt.Errorf("cluster: listen %s: %w", cfg.Listen, err))
	}
	c.Addr = ln.Addr().String()
	c.spawn(func() { c.gs.Serve(ln) })
	if cfg.ExpectTargets > 0 {
		c.spawn(func() { c.createTable(bg, cfg.ExpectTargets, max(1, min(cfg.Replicas, cfg.ExpectTargets)), cfg.Logger) })
	}
	// The collector deletes unlinked files' chunks through its own client.
	var tr fabric.Transport = cfg.Local
	if cfg.Local == nil {
		if tr, err = tcp.New(tcp.Config{Secret: auth.FabricSecret(cfg.Token), Logger: cfg.Logger}); err != nil {
			return fail(err)
		}
	}
	c.spawn(func() { c.collect(bg, tr, cfg) })
	return c, nil
}

// createTable makes chain table 1 once enough targets registered. A
// placement the map refuses (too few nodes or racks for the replicas) is
// logged, each new reason once, and tried again as nodes register.
func (c *Control) createTable(ctx context.Context, targets, replicas int, log *slog.Logger) {
	refused := ""
	for ctx.Err() == nil {
		if c.replica.IsLeader() {
			m, err := c.replica.ClusterMap()
			if err == nil && len(m.Tables) > 0 {
				return
			}
			if err == nil && len(m.Targets) >= targets {
				if err := c.replica.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: &mgmtdpb.CreateChainTable{
					Table: 1, Replicas: uint32(replicas), Chains: uint32(len(m.Targets)), Placement: mgmtd.PlacementSpread}}}); err == nil {
					return
				} else if errors.Is(err, mgmtd.ErrBadCommand) && err.Error() != refused {
					refused = err.Error()
					log.Warn("chain table not created", "targets", len(m.Targets), "replicas", replicas, "err", err)
				}
			}
		}
		select {
		case <-c.replica.ClusterChanged():
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

func (c *Control) collect(ctx context.Context, tr fabric.Transport, cfg ControlConfig) {
	conn, err := rpc.Dial(c.Addr, auth.Credentials(cfg.Token))
	if err != nil {
		return
	}
	defer conn.Close()
	rt, err := routing.Watch(ctx, mgmtdpb.NewMgmtdClient(conn), cfg.Logger)
	if err != nil {
		return
	}
	defer rt.Close()
	ep, err := tr.Dialer("collector")
	if err != nil {
		return
	}
	defer ep.Close()
	col := meta.NewCollector(c.replica, meta.StorageRemover{Client: chunkio.NewClient(ep, rt), Map: c.replica.ClusterMap},
		meta.CollectorConfig{Delay: cfg.CollectDelay, Workers: cfg.CollectWorkers, ElectionWait: cfg.ElectionWait,
			ClientLease: cfg.ClientLease, Metrics: c.metrics.Collector(), Logger: cfg.Logger})
	c.collector.Store(col)
	col.Run(ctx, cfg.CollectInterval)
}

// Collect runs one round of the chunk collector at once, as if the clock
// read now, and returns how many files it collected.
func (c *Control) Collect(ctx context.Context, now time.Time) (int, error) {
	col := c.collector.Load()
	if col == nil {
		return 0, errors.New("cluster: the collector is not running yet")
	}
	return col.Collect(ctx, now)
}

// Metrics is the replica's metrics (sluice_meta_*, sluice_mgmtd_*), for a
// process's /metrics.
func (c *Control) Metrics() prometheus.Gatherer { return c.metrics.Gatherer() }

// Ready says whether the replica serves: nil once it knows a leader.
func (c *Control) Ready(context.Context) error {
	if c.replica.Leader() == "" {
		return errors.New("meta: no leader known")
	}
	return nil
}

// API is the REST/JSON gateway to the replica's gRPC services (meta and
// mgmtd), forwarding each request, with its Authorization header as the
// call's token, to this replica's gRPC address; its connection closes
// with the replica.
func (c *Control) API() (http.Handler, error) {
	return gateway.Gateway(c.bg, c.Addr, nil, metapb.RegisterMetaHandlerFromEndpoint, mgmtdpb.RegisterMgmtdHandlerFromEndpoint)
}

// IsLeader reports whether this replica leads the group.
func (c *Control) IsLeader() bool { return c.replica != nil && c.replica.IsLeader() }

func (c *Control) spawn(fn func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// Close stops the replica; closing again does nothing.
func (c *Control) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		if c.gs != nil {
			c.gs.Stop()
		}
		c.wg.Wait()
		if c.replica != nil {
			c.replica.Close()
		}
	})
	return nil
}

// StorageConfig configures a storage node.
type StorageConfig struct {
	Dir     string // target directories go under it, one per target
	Cluster string // the control plane's gRPC addresses, comma-separated
	Token   string
	NodeID  string // the node's name in the cluster map
	// Rack, optional, is the node's failure domain above itself: when nodes
	// name racks, no two replicas of a chain are placed in one rack.
	Rack         string
	FabricListen string   // the fabric address (default 127.0.0.1:0)
	Targets      []uint32 // the node's targets
	ChunkSize    int      // the largest chunk it must hold (default 4 MiB)
	// DropLeft is how long a target stays out of a chain a replica move
	// took it from before the node removes its chunks of that chain
	// (default 10 minutes; negative: never).
	DropLeft time.Duration
	// Local, when set, is a network of this process that the node's TCP
	// endpoint is attached to (local.Network.Attach).
	Local  *local.Network
	Logger *slog.Logger
}

// Storage is a running storage node.
type Storage struct {
	targets []uint32
	ready   func() error
	reg     *prometheus.Registry
	ep      fabric.Endpoint
	conn    *rpc.LeaderConn
	routing *routing.WatchedRouting
	engines []*chunkstore.Engine
	node    *storage.Node
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// StartStorage starts a storage node: it opens its targets, serves its
// endpoint (answering "unavailable" until it may serve), registers with
// mgmtd (a restart sends its targets back to be resynced), heartbeats for
// its lease, follows the routing, and serves its targets.
func StartStorage(ctx context.Context, cfg StorageConfig) (*Storage, error) {
	if cfg.FabricListen == "" {
		cfg.FabricListen = "127.0.0.1:0"
	}
	cfg.ChunkSize = max(cfg.ChunkSize, 4<<20)
	cfg.Logger = quiet(cfg.Logger)
	s := &Storage{targets: cfg.Targets, reg: prometheus.NewRegistry()}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	fail := func(err error) (*Storage, error) {
		s.Close()
		return nil, err
	}
	targets := map[routing.TargetID]*chunkstore.Engine{}
	for _, t := range cfg.Targets {
		e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: filepath.Join(cfg.Dir, fmt.Sprint("target-", t)), MaxChunkSize: cfg.ChunkSize, Logger: cfg.Logger})
		if err != nil {
			return fail(err)
		}
		s.engines = append(s.engines, e)
		targets[routing.TargetID(t)] = e
	}
	tr, err := tcp.New(tcp.Config{Secret: auth.FabricSecret(cfg.Token), Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	if s.ep, err = tr.Listen(cfg.FabricListen); err != nil {
		return fail(err)
	}
	if cfg.Local != nil {
		far := s.ep
		if s.ep, err = cfg.Local.Attach(far.(local.Shareable)); err != nil {
			far.Close()
			s.ep = nil
			return fail(err)
		}
	}
	// The node answers from the moment it listens, "unavailable" until it
	// holds a lease and routes by a map as new as the lease's.
	late := &lateRouting{set: make(chan struct{})}
	var agentp atomic.Pointer[mgmtd.Agent]
	ready := func() error {
		a := agentp.Load()
		if a == nil {
			return fmt.Errorf("node starting: %w", chunkio.ErrUnavailable)
		}
		until, ver := a.Lease()
		if time.Now().After(until) {
			return fmt.Errorf("no lease from mgmtd: %w", chunkio.ErrUnavailable)
		}
		if have := late.Routing().Version; have < ver {
			return fmt.Errorf("routing at map version %d, the lease's is %d: %w", have, ver, chunkio.ErrUnavailable)
		}
		return nil
	}
	s.ready = ready
	onSynced := func(chain routing.ChainID, target routing.TargetID, chainVer uint64) error {
		a := agentp.Load()
		if a == nil {
			return fmt.Errorf("node starting: %w", chunkio.ErrUnavailable)
		}
		return a.OnSynced(chain, target, chainVer)
	}
	if cfg.DropLeft == 0 {
		cfg.DropLeft = 10 * time.Minute
	}
	if s.node, err = storage.NewNode(storage.NodeConfig{Endpoint: s.ep, Routing: late, Targets: targets,
		BufferSize: cfg.ChunkSize, Buffers: 16, Logger: cfg.Logger, OnSynced: onSynced, Ready: ready, DropLeft: cfg.DropLeft,
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"node": cfg.NodeID}, s.reg)}); err != nil {
		return fail(err)
	}
	if s.conn, err = rpc.Dial(cfg.Cluster, auth.Credentials(cfg.Token)); err != nil {
		return fail(err)
	}
	mc := mgmtdpb.NewMgmtdClient(s.conn)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	var agent *mgmtd.Agent
	for {
		agent, err = mgmtd.NewAgent(rctx, mc, &mgmtdpb.Node{Id: cfg.NodeID, Address: string(s.ep.ID()), Rack: cfg.Rack}, cfg.Targets, 500*time.Millisecond, cfg.Logger)
		if err == nil || rctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the control plane may still be electing
	}
	if err != nil {
		return fail(fmt.Errorf("cluster: register node %s: %w", cfg.NodeID, err))
	}
	agent.Space = func() []*mgmtdpb.TargetSpace {
		var out []*mgmtdpb.TargetSpace
		for id, e := range targets {
			if total, free, err := e.Space(); err == nil {
				out = append(out, &mgmtdpb.TargetSpace{Target: uint32(id), TotalBytes: total, FreeBytes: free})
			}
		}
		return out
	}
	agentp.Store(agent)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		agent.Run(bg)
	}()
	if s.routing, err = routing.Watch(bg, mc, cfg.Logger); err != nil {
		return fail(err)
	}
	late.use(s.routing)
	return s, nil
}

// Metrics is the node's metrics (sluice_storage_*, each labelled with the
// node's id, so the nodes of one process stay apart), for a process's
// /metrics.
func (s *Storage) Metrics() prometheus.Gatherer { return s.reg }

// Ready says whether the node serves: nil while it holds a lease from
// mgmtd, its routing is as new as the lease's, and every one of its targets
// is registered and serving; else why not.
func (s *Storage) Ready(context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	r := s.routing.Routing()
	for _, id := range s.targets {
		t, ok := r.Targets[routing.TargetID(id)]
		if !ok {
			return fmt.Errorf("target %d is not registered", id)
		}
		if t.State != routing.Serving {
			return fmt.Errorf("target %d is %v", id, t.State)
		}
	}
	return nil
}

// lateRouting is a routing.Provider whose source arrives after the
// node starts serving: empty routing until then.
type lateRouting struct {
	mu  sync.Mutex
	src routing.Provider
	set chan struct{} // closed when src is
}

func (l *lateRouting) use(src routing.Provider) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.src = src
	close(l.set)
}

func (l *lateRouting) source() routing.Provider {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src
}

func (l *lateRouting) Routing() *routing.Routing {
	if src := l.source(); src != nil {
		return src.Routing()
	}
	return &routing.Routing{}
}

func (l *lateRouting) Changed() <-chan struct{} {
	if src := l.source(); src != nil {
		return src.Changed()
	}
	return l.set
}

// Close stops the node.
func (s *Storage) Close() error {
	s.cancel()
	if s.node != nil {
		s.node.Close()
	}
	if s.routing != nil {
		s.routing.Close()
	}
	if s.ep != nil {
		s.ep.Close()
	}
	s.wg.Wait()
	if s.conn != nil {
		s.conn.Close()
	}
	for _, e := range s.engines {
		e.Close()
	}
	return nil
}

// Config configures an embedded cluster. Zero fields take the defaults.
type Config struct {
	// Dir holds everything: the token, the metadata group, the targets.
	Dir string
	// Targets is the number of storage targets (default 3), one per node.
	Targets int
	// Replicas is each chain's length (default min(3, Targets)).
	Replicas int
	// Listen is the gRPC address for clients (default 127.0.0.1:0).
	Listen string
	// ChunkSize is the root directory's chunk size (default 1 MiB).
	ChunkSize int
	// CollectDelay is how long unlinked files' chunks stay (default 1
	// minute); CollectInterval and ElectionWait are
	// ControlConfig's.
	CollectDelay    time.Duration
	CollectInterval time.Duration
	ElectionWait    time.Duration
	ClientLease     time.Duration
	// InlineMax is ControlConfig's: the largest file kept inline in the
	// metadata store (default meta.DefaultInlineMax; negative: none).
	InlineMax int
	Logger    *slog.Logger
}

// Cluster is a running embedded cluster.
type Cluster struct {
	// Addr is the gRPC address clients connect to; Token the cluster token.
	Addr  string
	Token string

	local   *local.Network
	control *Control
	storage []*Storage
}

// Start starts (or restarts) a whole cluster in cfg.Dir, in this process.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Targets <= 0 {
		cfg.Targets = 3
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = min(3, cfg.Targets)
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 1 << 20
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	token, err := auth.LoadToken(filepath.Join(cfg.Dir, "token"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Token: token, local: local.NewNetwork()}
	c.control, err = StartControl(ctx, ControlConfig{Dir: filepath.Join(cfg.Dir, "meta"), Listen: cfg.Listen, Token: token,
		ChunkSize: cfg.ChunkSize, Stripe: cfg.Targets, ExpectTargets: cfg.Targets, Replicas: cfg.Replicas, Local: c.local,
		CollectDelay: cfg.CollectDelay, CollectInterval: cfg.CollectInterval, ElectionWait: cfg.ElectionWait,
		ClientLease: cfg.ClientLease, InlineMax: cfg.InlineMax, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	c.Addr = c.control.Addr
	for deadline := time.Now().Add(20 * time.Second); !c.control.IsLeader(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.Close()
			return nil, errors.New("cluster: the metadata group elected no leader")
		}
	}
	for i := 1; i <= cfg.Targets; i++ {
		s, err := StartStorage(ctx, StorageConfig{Dir: cfg.Dir, Cluster: c.Addr, Token: token, NodeID: fmt.Sprint("node-", i),
			Targets: []uint32{uint32(i)}, ChunkSize: cfg.ChunkSize, Local: c.local, Logger: cfg.Logger})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.storage = append(c.storage, s)
	}
	// Ready when the chain table exists and every target serves.
	if err := c.waitReady(ctx, cfg.Targets); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Metrics gathers the whole cluster's metrics: the control plane's and
// every storage node's.
func (c *Cluster) Metrics() prometheus.Gatherer {
	g := prometheus.Gatherers{c.control.Metrics()}
	for _, s := range c.storage {
		g = append(g, s.Metrics())
	}
	return g
}

// Ready is nil when the control plane knows a leader and every storage
// node is ready (Storage.Ready).
func (c *Cluster) Ready(ctx context.Context) error {
	if err := c.control.Ready(ctx); err != nil {
		return err
	}
	for _, s := range c.storage {
		if err := s.Ready(ctx); err != nil {
			return err
		}
	}
	return nil
}

// API is the control plane's REST gateway (Control.API).
func (c *Cluster) API() (http.Handler, error) { return c.control.API() }

// Collect runs one round of the chunk collector at once (Control.Collect).
func (c *Cluster) Collect(ctx context.Context, now time.Time) (int, error) {
	return c.control.Collect(ctx, now)
}

// Fabric is the cluster's in-process network: an SDK client made on it
// (sdk.Config.Fabric) reaches the storage nodes by memory copy instead of
// TCP. It serves only this process.
func (c *Cluster) Fabric() fabric.Transport { return c.local }

func (c *Cluster) waitReady(ctx context.Context, targets int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := c.control.replica.ClusterMap()
		if err == nil && len(m.Tables) > 0 {
			serving := 0
			for _, t := range m.Targets {
				if t.State == mgmtdpb.TargetState_SERVING {
					serving++
				}
			}
			if serving >= targets {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("cluster: storage never came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops everything, storage first, the control plane last.
func (c *Cluster) Close() error {
	for _, s := range c.storage {
		s.Close()
	}
	if c.control != nil {
		c.control.Close()
	}
	return nil
}
