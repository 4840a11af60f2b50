// Package cluster runs a whole Sluice cluster in one process: a one-replica
// metadata group (namespace and cluster map), the failure detector and chunk
// collector, the gRPC services with the cluster token, and storage targets
// in local directories, each a storage node on its own TCP fabric endpoint
// so outside clients reach them. It is what `sluice dev` runs, and what SDK
// tests run against. Restarting on the same directory keeps the data and the
// token.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/fabric/tcp"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/meta"
	"github.com/sluicefs/sluice/server/mgmtd"
	"github.com/sluicefs/sluice/server/rpc"
	"github.com/sluicefs/sluice/server/storage"
)

// Config configures an embedded cluster. Zero fields take the defaults.
type Config struct {
	// Dir holds everything: the token, the metadata group, the targets.
	Dir string
	// Targets is the number of storage targets (default 3).
	Targets int
	// Replicas is each chain's length (default min(3, Targets)).
	Replicas int
	// Listen is the gRPC address for clients (default 127.0.0.1:0).
	Listen string
	// ChunkSize is the root directory's chunk size (default 1 MiB).
	ChunkSize int
	// Logger (default: discard).
	Logger *slog.Logger
}

// Cluster is a running embedded cluster.
type Cluster struct {
	// Addr is the gRPC address clients connect to; Token the cluster token.
	Addr  string
	Token string

	replica *meta.Replica
	gs      *grpc.Server
	conn    *grpc.ClientConn
	routing *mgmtd.WatchedRouting
	eps     []fabric.Endpoint
	engines []*storage.Engine
	nodes   []*storage.Node
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// FabricSecret is the fabric secret derived from the cluster token: every
// process that holds the token can join the data plane.
func FabricSecret(token string) []byte {
	s := sha256.Sum256([]byte("sluice fabric " + token))
	return s[:]
}

// Start starts (or restarts) the cluster in cfg.Dir.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Targets <= 0 {
		cfg.Targets = 3
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = min(3, cfg.Targets)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	token, err := loadToken(filepath.Join(cfg.Dir, "token"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Token: token}
	bg, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	fail := func(err error) (*Cluster, error) {
		c.Close()
		return nil, err
	}

	// The metadata group, bootstrapped on first start.
	c.replica, err = meta.StartReplica(meta.ReplicaConfig{ID: "meta", Dir: filepath.Join(cfg.Dir, "meta"), Bind: "127.0.0.1:0",
		RootLayout: &metapb.Layout{ChainTable: 1, ChunkSize: uint32(cfg.ChunkSize), Stripe: uint32(cfg.Targets)}, Fast: true})
	if err != nil {
		return fail(err)
	}
	if err := c.replica.Bootstrap(map[string]string{"meta": c.replica.Addr()}); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fail(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !c.replica.IsLeader(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fail(errors.New("cluster: the metadata group elected no leader"))
		}
	}
	det := mgmtd.NewDetector(c.replica, 3*time.Second, cfg.Logger)
	c.spawn(func() { det.Run(bg) })

	// The services.
	unary, stream := rpc.TokenAuth(token)
	c.gs = grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	metapb.RegisterMetaServer(c.gs, meta.NewService(c.replica))
	mgmtdpb.RegisterMgmtdServer(c.gs, mgmtd.NewService(c.replica, det))
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fail(fmt.Errorf("cluster: listen %s: %w", cfg.Listen, err))
	}
	c.Addr = ln.Addr().String()
	c.spawn(func() { c.gs.Serve(ln) })
	if c.conn, err = grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return fail(err)
	}
	mc := mgmtdpb.NewMgmtdClient(c.conn)
	actx := rpc.WithToken(bg, token)

	// Storage targets, each a node on its own TCP endpoint.
	tr, err := tcp.New(tcp.Config{Secret: FabricSecret(token), Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	var agents []*mgmtd.Agent
	for i := 1; i <= cfg.Targets; i++ {
		ep, err := tr.Listen("127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		c.eps = append(c.eps, ep)
		eng, err := storage.OpenEngine(storage.EngineConfig{Dir: filepath.Join(cfg.Dir, fmt.Sprint("target-", i)), MaxChunkSize: max(cfg.ChunkSize, 4<<20)})
		if err != nil {
			return fail(err)
		}
		c.engines = append(c.engines, eng)
		a, err := mgmtd.NewAgent(actx, mc, &mgmtdpb.Node{Id: fmt.Sprint("node-", i), Address: string(ep.ID())}, []uint32{uint32(i)}, 500*time.Millisecond, cfg.Logger)
		if err != nil {
			return fail(err)
		}
		agents = append(agents, a)
		c.spawn(func() { a.Run(bg) })
	}
	if m, err := c.replica.ClusterMap(); err == nil && len(m.Tables) == 0 {
		if _, err := mc.CreateTable(actx, &mgmtdpb.CreateChainTable{Table: 1, Replicas: uint32(cfg.Replicas), Chains: uint32(cfg.Targets)}); err != nil {
			return fail(err)
		}
	}
	if c.routing, err = mgmtd.WatchRouting(actx, mc, cfg.Logger); err != nil {
		return fail(err)
	}
	for i, ep := range c.eps {
		n, err := storage.NewNode(storage.NodeConfig{Endpoint: ep, Routing: c.routing, Targets: map[storage.TargetID]*storage.Engine{storage.TargetID(i + 1): c.engines[i]},
			BufferSize: max(cfg.ChunkSize, 4<<20), Buffers: 16, Logger: cfg.Logger, OnSynced: agents[i].OnSynced})
		if err != nil {
			return fail(err)
		}
		c.nodes = append(c.nodes, n)
	}

	// The collector, deleting unlinked files' chunks.
	cep, err := tr.Dialer("collector")
	if err != nil {
		return fail(err)
	}
	c.eps = append(c.eps, cep)
	col := meta.NewCollector(c.replica, meta.StorageRemover{Client: storage.NewClient(cep, c.routing), Map: c.replica.ClusterMap}, time.Minute, cfg.Logger)
	c.spawn(func() { col.Run(bg, 10*time.Second) })
	return c, nil
}

func (c *Cluster) spawn(fn func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// loadToken reads the cluster token, making one the first time.
func loadToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); len(t) >= 16 {
			return t, nil
		}
		return "", fmt.Errorf("cluster: token file %s holds no usable token (16+ characters)", path)
	}
	var b [24]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster: write token: %w", err)
	}
	return token, nil
}

// Close stops everything, storage first, the metadata group last.
func (c *Cluster) Close() error {
	c.cancel()
	for _, n := range c.nodes {
		n.Close()
	}
	if c.routing != nil {
		c.routing.Close()
	}
	for _, ep := range c.eps {
		ep.Close()
	}
	if c.gs != nil {
		c.gs.Stop()
	}
	if c.conn != nil {
		c.conn.Close()
	}
	c.wg.Wait()
	for _, e := range c.engines {
		e.Close()
	}
	if c.replica != nil {
		c.replica.Close()
	}
	return nil
}
