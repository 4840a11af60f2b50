package mgmtd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// Agent is a storage node's side of mgmtd: it registers the node and its
// targets, heartbeats while the node runs, holds the lease each heartbeat
// grants (Lease: what storage.NodeConfig.Ready is built on), and reports
// resyncs the node finished (pass OnSynced as storage.NodeConfig.OnSynced).
type Agent struct {
	client   mgmtdpb.MgmtdClient
	node     *mgmtdpb.Node
	targets  []uint32
	interval time.Duration
	log      *slog.Logger
	// Space, if set, reports the targets' disks with every heartbeat.
	Space func() []*mgmtdpb.TargetSpace

	lease lease
}

type lease struct {
	mu     sync.Mutex
	until  time.Time
	mapVer uint64
}

// NewAgent registers node with targets (a restart sends them back to be
// resynced) and returns its agent. client's connection carries the cluster
// token (auth.Credentials).
func NewAgent(ctx context.Context, client mgmtdpb.MgmtdClient, node *mgmtdpb.Node, targets []uint32, interval time.Duration, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{client: client, node: node, targets: targets, interval: interval, log: log}
	if _, err := client.Register(ctx, &mgmtdpb.RegisterNode{Node: node, Targets: targets}); err != nil {
		return nil, err
	}
	return a, nil
}

// Run heartbeats now and then every interval until ctx ends.
func (a *Agent) Run(ctx context.Context) {
	a.heartbeat(ctx)
	tick.Every(ctx, a.interval, func() { a.heartbeat(ctx) })
}

func (a *Agent) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 2*a.interval) // a hung call must not outlast the lease
	defer cancel()
	req := &mgmtdpb.HeartbeatRequest{Node: a.node.Id, Targets: a.targets}
	if a.Space != nil {
		req.Space = a.Space()
	}
	sent := time.Now()
	reply, err := a.client.Heartbeat(hctx, req)
	if err != nil {
		a.log.Debug("heartbeat failed", "err", err)
		return
	}
	// The lease runs from when the heartbeat was sent: mgmtd counts its
	// (longer) lease from when it arrived, so the node's ends first.
	a.lease.mu.Lock()
	if until := sent.Add(time.Duration(reply.LeaseMs) * time.Millisecond); until.After(a.lease.until) {
		a.lease.until = until
	}
	a.lease.mapVer = max(a.lease.mapVer, reply.MapVersion)
	a.lease.mu.Unlock()
}

// Lease is how long the node may serve on the heartbeats answered so far,
// and the map version it must have seen first (0, zero time: none yet).
func (a *Agent) Lease() (until time.Time, mapVersion uint64) {
	a.lease.mu.Lock()
	defer a.lease.mu.Unlock()
	return a.lease.until, a.lease.mapVer
}

// OnSynced reports that this node brought target in sync in chain, at the
// chain's version chainVer.
func (a *Agent) OnSynced(chain routing.ChainID, target routing.TargetID, chainVer uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*a.interval)
	defer cancel()
	if _, err := a.client.ReportSynced(ctx, &mgmtdpb.TargetSynced{Chain: uint32(chain), Target: uint32(target), ChainVer: chainVer}); err != nil {
		return fmt.Errorf("report target %d synced in chain %d: %w", target, chain, err)
	}
	return nil
}
