package sdk

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// MoveProgress is where the cluster's replica moves stand: how drains and
// a rebalance get done (see `sluice admin`).
type MoveProgress struct {
	Done      uint64 `json:"done"`      // moves completed, ever
	Cancelled uint64 `json:"cancelled"` // moves whose new replica died first, ever
	InFlight  []Move `json:"in_flight"`
	// ToGo is how many moves the current drains and rebalance still need
	// beyond those in flight, as the planner would play them out now.
	ToGo      int  `json:"to_go"`
	Rebalance bool `json:"rebalance"` // a rebalance is on
	// Draining are the draining targets; Drained those of them in no chain
	// any more, safe to stop.
	Draining []uint32 `json:"draining"`
	Drained  []uint32 `json:"drained"`
}

// Move is one replica move: To catches up in Chain, then From leaves it.
type Move struct {
	Chain uint32 `json:"chain"`
	From  uint32 `json:"from"`
	To    uint32 `json:"to"`
}

// Finished reports whether no move is in flight or to go.
func (p MoveProgress) Finished() bool { return len(p.InFlight) == 0 && p.ToGo == 0 }

func progressOf(p *mgmtdpb.MoveProgress) MoveProgress {
	out := MoveProgress{Done: p.Done, Cancelled: p.Cancelled, ToGo: int(p.ToGo), Rebalance: p.Rebalance,
		Draining: p.Draining, Drained: p.Drained, InFlight: []Move{}}
	for _, m := range p.InFlight {
		out.InFlight = append(out.InFlight, Move{Chain: m.Chain, From: m.From, To: m.To})
	}
	return out
}

// adminCall runs one mgmtd admin call; a refusal comes back as its message.
func (c *Client) adminCall(ctx context.Context, op string, call func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error)) (MoveProgress, error) {
	cctx, done := c.call(ctx)
	defer done()
	p, err := call(cctx, mgmtdpb.NewMgmtdClient(c.conn))
	if err != nil {
		return MoveProgress{}, fmt.Errorf("%s: %s", op, status.Convert(err).Message())
	}
	return progressOf(p), nil
}

// Drain marks targets, and every target of nodes, draining: mgmtd gives
// each of their chains a replacement replica, then takes them out. A
// dead node drained is a dead node replaced. Draining what drains
// already changes nothing.
func (c *Client) Drain(ctx context.Context, nodes []string, targets []uint32) (MoveProgress, error) {
	return c.adminCall(ctx, "drain", func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error) {
		return m.Drain(ctx, &mgmtdpb.DrainRequest{Nodes: nodes, Targets: targets})
	})
}

// Undrain stops draining targets and nodes' targets; moves in flight
// finish.
func (c *Client) Undrain(ctx context.Context, nodes []string, targets []uint32) (MoveProgress, error) {
	return c.adminCall(ctx, "undrain", func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error) {
		return m.Drain(ctx, &mgmtdpb.DrainRequest{Nodes: nodes, Targets: targets, Undrain: true})
	})
}

// Retire forgets drained targets (and nodes left with none) once their
// drain finished: a retired node that starts again registers as new.
// Retiring what is gone already changes nothing.
func (c *Client) Retire(ctx context.Context, nodes []string, targets []uint32) (MoveProgress, error) {
	return c.adminCall(ctx, "retire", func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error) {
		return m.Retire(ctx, &mgmtdpb.DrainRequest{Nodes: nodes, Targets: targets})
	})
}

// Rebalance starts moving replicas until every live target holds within
// one of the mean number of chains (stop: ends it, moves in flight
// finish).
func (c *Client) Rebalance(ctx context.Context, stop bool) (MoveProgress, error) {
	return c.adminCall(ctx, "rebalance", func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error) {
		return m.Rebalance(ctx, &mgmtdpb.RebalanceRequest{Stop: stop})
	})
}

// Moves reports the replica moves.
func (c *Client) Moves(ctx context.Context) (MoveProgress, error) {
	return c.adminCall(ctx, "moves", func(ctx context.Context, m mgmtdpb.MgmtdClient) (*mgmtdpb.MoveProgress, error) {
		return m.Moves(ctx, &mgmtdpb.Empty{})
	})
}
