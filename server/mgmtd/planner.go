package mgmtd

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// PlannerConfig sets how many replica moves run at once. Zero values take
// the defaults.
type PlannerConfig struct {
	// MaxMoves bounds the moves in flight in the whole cluster (default 4).
	MaxMoves int
	// MaxPerTarget bounds the moves one target takes part in at once, as
	// the replaced replica or the new one (default 1).
	MaxPerTarget int
	// Interval is how often the planner looks again when the map does not
	// change (default 1s).
	Interval time.Duration
	Logger   *slog.Logger
}

// Planner runs on the metadata leader, like the Detector, and turns the
// map's drain and rebalance goals into replica moves: for every chain of a
// draining target a replacement, and while a rebalance is on, moves from
// the targets holding the most chains to those holding the fewest until
// every one is within one of the mean. Its goals live in the map, so a
// new leader carries on where the old one stopped.
type Planner struct {
	g   Group
	cfg PlannerConfig
}

// NewPlanner plans for g's map.
func NewPlanner(g Group, cfg PlannerConfig) *Planner {
	if cfg.MaxMoves <= 0 {
		cfg.MaxMoves = 4
	}
	if cfg.MaxPerTarget <= 0 {
		cfg.MaxPerTarget = 1
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Planner{g: g, cfg: cfg}
}

// Run plans at every change of the map and every interval, while this
// replica leads, until ctx ends.
func (p *Planner) Run(ctx context.Context) {
	for ctx.Err() == nil {
		changed := p.g.ClusterChanged()
		if p.g.IsLeader() {
			p.step(ctx)
		}
		select {
		case <-changed:
		case <-time.After(p.cfg.Interval):
		case <-ctx.Done():
		}
	}
}

func (p *Planner) step(ctx context.Context) {
	m, err := p.g.ClusterMap()
	if err != nil {
		return
	}
	moves := Plan(m, p.cfg.MaxMoves, p.cfg.MaxPerTarget)
	for _, mv := range moves {
		if err := p.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_MoveReplica{MoveReplica: mv}}); err != nil {
			p.cfg.Logger.Warn("replica move not started", "chain", mv.Chain, "from", mv.From, "to", mv.To, "err", err)
			return
		}
		p.cfg.Logger.Info("replica move started", "chain", mv.Chain, "from", mv.From, "to", mv.To)
	}
	if m.Rebalance && len(moves) == 0 && inFlight(m) == 0 {
		if err := p.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetRebalance{SetRebalance: &mgmtdpb.SetRebalance{}}}); err == nil {
			p.cfg.Logger.Info("rebalance done", "moves done", m.MovesDone)
		}
	}
}

func (p *Planner) propose(ctx context.Context, cmd *mgmtdpb.Command) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.g.ProposeCluster(ctx, cmd)
}

func inFlight(m *mgmtdpb.ClusterMap) int {
	n := 0
	for _, c := range m.Chains {
		if c.Move != nil {
			n++
		}
	}
	return n
}

// loads counts each target's chains, not counting those it is leaving.
func loads(m *mgmtdpb.ClusterMap) map[uint32]int {
	leaving := map[uint32]map[uint32]bool{}
	for _, c := range m.Chains {
		if c.Move != nil {
			if leaving[c.Move.From] == nil {
				leaving[c.Move.From] = map[uint32]bool{}
			}
			leaving[c.Move.From][c.Id] = true
		}
	}
	out := map[uint32]int{}
	for _, t := range m.Targets {
		for _, cid := range t.Chains {
			if !leaving[t.Id][cid] {
				out[t.Id]++
			}
		}
	}
	return out
}

// byLoad is targets from the fewest chains to the most (ties by id).
func byLoad(m *mgmtdpb.ClusterMap, keep func(*mgmtdpb.Target) bool) []*mgmtdpb.Target {
	load := loads(m)
	var out []*mgmtdpb.Target
	for _, t := range m.Targets {
		if keep(t) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *mgmtdpb.Target) int {
		return cmp.Or(cmp.Compare(load[a.Id], load[b.Id]), cmp.Compare(a.Id, b.Id))
	})
	return out
}

// Plan chooses the moves to start now on map m, at most maxMoves in
// flight in all and maxPerTarget per target: first a replacement for each
// chain of each draining target (the least loaded eligible target), then,
// while a rebalance is on, moves from the most loaded live targets to the
// least loaded until they differ by at most one. It is a pure function of
// the map.
func Plan(m *mgmtdpb.ClusterMap, maxMoves, maxPerTarget int) []*mgmtdpb.Move {
	m = proto.Clone(m).(*mgmtdpb.ClusterMap)
	busy := map[uint32]int{}
	n := 0
	for _, c := range m.Chains {
		if c.Move != nil {
			n++
			busy[c.Move.From]++
			busy[c.Move.To]++
		}
	}
	var out []*mgmtdpb.Move
	free := func(id uint32) bool { return busy[id] < maxPerTarget }
	start := func(mv *mgmtdpb.Move) bool {
		if n >= maxMoves || !free(mv.From) || !free(mv.To) || moveReplica(m, mv) != nil {
			return false
		}
		n++
		busy[mv.From]++
		busy[mv.To]++
		out = append(out, mv)
		return true
	}
	draining := byLoad(m, func(t *mgmtdpb.Target) bool { return t.Draining })
	slices.SortFunc(draining, func(a, b *mgmtdpb.Target) int { return cmp.Compare(a.Id, b.Id) })
	for _, t := range draining {
		for _, cid := range slices.Clone(t.Chains) {
			c := chain(m, cid)
			if n >= maxMoves || !free(t.Id) {
				break
			}
			if c == nil || movable(c) != "" {
				continue
			}
			dom := domains(m, c, t.Id)
			for _, to := range byLoad(m, func(x *mgmtdpb.Target) bool { return eligible(m, x, c, dom) && free(x.Id) }) {
				if start(&mgmtdpb.Move{Chain: cid, From: t.Id, To: to.Id}) {
					break
				}
			}
		}
	}
	for m.Rebalance && n < maxMoves {
		mv := balanceMove(m, free)
		if mv == nil || !start(mv) {
			break
		}
	}
	return out
}

// balanceMove is the next move that evens out the live, non-draining
// targets' chain counts: from the most loaded to the least loaded one that
// can take one of its chains, only where they differ by two or more.
func balanceMove(m *mgmtdpb.ClusterMap, free func(uint32) bool) *mgmtdpb.Move {
	pool := byLoad(m, func(t *mgmtdpb.Target) bool { return t.State != mgmtdpb.TargetState_OFFLINE && !t.Draining })
	load := loads(m)
	for i := len(pool) - 1; i >= 0; i-- {
		src := pool[i]
		if !free(src.Id) {
			continue
		}
		for _, dst := range pool {
			if load[src.Id]-load[dst.Id] < 2 {
				break
			}
			if !free(dst.Id) || dst.Full {
				continue
			}
			for _, cid := range src.Chains {
				c := chain(m, cid)
				if c == nil || movable(c) != "" || !eligible(m, dst, c, domains(m, c, src.Id)) {
					continue
				}
				return &mgmtdpb.Move{Chain: cid, From: src.Id, To: dst.Id}
			}
		}
	}
	return nil
}

// ToGo counts the moves still to start on map m: those in flight are taken
// as done, and the planner's choices are played out, each move completing
// at once, until it has nothing left to do.
func ToGo(m *mgmtdpb.ClusterMap) int {
	m = proto.Clone(m).(*mgmtdpb.ClusterMap)
	finish := func() {
		for _, c := range m.Chains {
			if c.Move == nil {
				continue
			}
			rc := routing.ChainFromMap(c)
			rc.Synced(routing.TargetID(c.Move.To))
			rc.Store(c)
			settleMove(m, c)
		}
	}
	finish()
	n := 0
	for range 1 << 16 { // a bound, never reached: every move lowers the imbalance
		moves := Plan(m, 1<<30, 1<<30)
		if len(moves) == 0 {
			break
		}
		for _, mv := range moves {
			moveReplica(m, mv)
		}
		n += len(moves)
		finish()
	}
	return n
}
