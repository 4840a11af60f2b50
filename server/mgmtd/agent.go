package mgmtd

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/storage"
)

// Agent is a storage node's side of mgmtd: it registers the node and its
// targets, heartbeats while the node runs, and reports resyncs the node
// finished (pass OnSynced as storage.NodeConfig.OnSynced).
type Agent struct {
	client   mgmtdpb.MgmtdClient
	node     *mgmtdpb.Node
	targets  []uint32
	interval time.Duration
	log      *slog.Logger
	ctx      context.Context // carries the token
	// Space, if set, reports the targets' disks with every heartbeat.
	Space func() []*mgmtdpb.TargetSpace
}

// NewAgent registers node with targets and returns its agent. ctx carries
// the cluster token for every call the agent makes.
func NewAgent(ctx context.Context, client mgmtdpb.MgmtdClient, node *mgmtdpb.Node, targets []uint32, interval time.Duration, log *slog.Logger) (*Agent, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Agent{client: client, node: node, targets: targets, interval: interval, log: log, ctx: ctx}
	if _, err := client.Register(ctx, &mgmtdpb.RegisterNode{Node: node, Targets: targets}); err != nil {
		return nil, err
	}
	return a, nil
}

// RebindAgent returns a's agent with ctx (carrying the token) for its
// later calls: registration may use a short-lived context, heartbeats the
// node's own.
func RebindAgent(a *Agent, ctx context.Context) *Agent {
	b := *a
	b.ctx = ctx
	return &b
}

// Run heartbeats now and then every interval until ctx ends.
func (a *Agent) Run(ctx context.Context) {
	a.heartbeat()
	tick.Every(ctx, a.interval, a.heartbeat)
}

func (a *Agent) heartbeat() {
	hctx, cancel := context.WithTimeout(a.ctx, 2*a.interval) // a hung call must not outlast the lease
	defer cancel()
	req := &mgmtdpb.HeartbeatRequest{Node: a.node.Id, Targets: a.targets}
	if a.Space != nil {
		req.Space = a.Space()
	}
	if _, err := a.client.Heartbeat(hctx, req); err != nil {
		a.log.Debug("heartbeat failed", "err", err)
	}
}

// OnSynced reports that this node brought target in sync in chain.
func (a *Agent) OnSynced(chain storage.ChainID, target storage.TargetID) {
	for i := 0; i < 10; i++ {
		_, err := a.client.ReportSynced(a.ctx, &mgmtdpb.TargetSynced{Chain: uint32(chain), Target: uint32(target)})
		if err == nil {
			return
		}
		a.log.Warn("cannot report a finished resync; retrying", "chain", chain, "target", target, "err", err)
		time.Sleep(100 * time.Millisecond)
	}
}
