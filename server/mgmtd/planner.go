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
	// the replaced replica or the new one (default 1); an offline replaced
	// one does no work and is not bounded.
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
	if err != nil || !m.Rebalance && !slices.ContainsFunc(m.Targets, func(t *mgmtdpb.Target) bool { return t.Draining }) {
		return // nothing asked of it: the usual case, kept cheap
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
	leaving := map[[2]uint32]bool{} // target, chain
	for _, c := range m.Chains {
		if c.Move != nil {
			leaving[[2]uint32{c.Move.From, c.Id}] = true
		}
		for _, id := range c.Leaving {
			leaving[[2]uint32{id, c.Id}] = true
		}
	}
	out := map[uint32]int{}
	for _, t := range m.Targets {
		for _, cid := range t.Chains {
			if !leaving[[2]uint32{t.Id, cid}] {
				out[t.Id]++
			}
		}
	}
	return out
}

// plan is the planner's working state over a copy of the map: moves
// started in it count at once.
type plan struct {
	*view
	load     map[uint32]int
	busy     map[uint32]int
	n        int // moves in flight
	maxMoves int
	perTgt   int
	out      []*mgmtdpb.Move
}

func (p *plan) free(id uint32) bool { return p.busy[id] < p.perTgt }

// freeFrom is free for the replica a move replaces: a dead one does no
// work in it (the resync reads from a live replica), so replacing a dead
// node is throttled only by the cluster's bound and its replacements'.
func (p *plan) freeFrom(id uint32) bool {
	t := p.targets[id]
	return t != nil && t.State == mgmtdpb.TargetState_OFFLINE || p.free(id)
}

func (p *plan) try(mv *mgmtdpb.Move) bool {
	if p.n >= p.maxMoves || !p.freeFrom(mv.From) || !p.free(mv.To) || p.start(mv) != nil {
		return false
	}
	p.n++
	p.busy[mv.From]++
	p.busy[mv.To]++
	p.load[mv.From]--
	p.load[mv.To]++
	p.out = append(p.out, mv)
	return true
}

// lighter reports whether target a holds fewer chains than b (ties by id).
func (p *plan) lighter(a, b *mgmtdpb.Target) bool {
	return cmp.Or(cmp.Compare(p.load[a.Id], p.load[b.Id]), cmp.Compare(a.Id, b.Id)) < 0
}

// replacement is the least loaded free target that may replace from in
// chain c, or nil.
func (p *plan) replacement(c *mgmtdpb.Chain, from uint32) *mgmtdpb.Target {
	dom := p.domains(c, from)
	var best *mgmtdpb.Target
	for _, t := range p.m.Targets {
		if p.eligible(t, c, dom) && p.free(t.Id) && (best == nil || p.lighter(t, best)) {
			best = t
		}
	}
	return best
}

// Plan chooses the moves to start now on map m, at most maxMoves in
// flight in all and maxPerTarget per target: first a replacement for each
// chain of each draining target (the least loaded eligible target), then,
// while a rebalance is on, moves from the most loaded live targets to the
// least loaded until they differ by at most one. It is a pure function of
// the map.
func Plan(m *mgmtdpb.ClusterMap, maxMoves, maxPerTarget int) []*mgmtdpb.Move {
	p := newPlan(proto.Clone(m).(*mgmtdpb.ClusterMap), maxMoves, maxPerTarget)
	p.plan()
	return p.out
}

func newPlan(m *mgmtdpb.ClusterMap, maxMoves, maxPerTarget int) *plan {
	p := &plan{view: newView(m), load: loads(m), busy: map[uint32]int{}, maxMoves: maxMoves, perTgt: maxPerTarget}
	for _, c := range m.Chains {
		if c.Move != nil {
			p.n++
			p.busy[c.Move.From]++
			p.busy[c.Move.To]++
		}
	}
	return p
}

func (p *plan) plan() {
	for _, t := range p.m.Targets { // in the map's order: by registration
		if !t.Draining {
			continue
		}
		for _, cid := range slices.Clone(t.Chains) {
			if p.n >= p.maxMoves || !p.freeFrom(t.Id) {
				break
			}
			c := p.chains[cid]
			if c == nil || movable(c) != "" || departing(c, t.Id) {
				continue
			}
			if to := p.replacement(c, t.Id); to != nil {
				p.try(&mgmtdpb.Move{Chain: cid, From: t.Id, To: to.Id})
			}
		}
	}
	for p.m.Rebalance && p.n < p.maxMoves {
		mv := p.balanceMove()
		if mv == nil || !p.try(mv) {
			break
		}
	}
}

// balanceMove is the next move that evens out the live, non-draining
// targets' chain counts: from the most loaded to the least loaded one that
// can take one of its chains, only where they differ by two or more.
func (p *plan) balanceMove() *mgmtdpb.Move {
	var pool []*mgmtdpb.Target
	for _, t := range p.m.Targets {
		if t.State != mgmtdpb.TargetState_OFFLINE && !t.Draining {
			pool = append(pool, t)
		}
	}
	slices.SortFunc(pool, func(a, b *mgmtdpb.Target) int {
		return cmp.Or(cmp.Compare(p.load[a.Id], p.load[b.Id]), cmp.Compare(a.Id, b.Id))
	})
	for i := len(pool) - 1; i >= 0; i-- {
		src := pool[i]
		if !p.free(src.Id) {
			continue
		}
		// The chains src could give up, and their domains, do not depend
		// on dst: found once per src, only when some dst is light enough.
		var from []movableChain
		looked := false
		for _, dst := range pool {
			if p.load[src.Id]-p.load[dst.Id] < 2 {
				break
			}
			if !p.free(dst.Id) || dst.Full {
				continue
			}
			if !looked {
				from, looked = p.movableChains(src), true
			}
			for _, mc := range from {
				if p.eligible(dst, mc.c, mc.dom) {
					return &mgmtdpb.Move{Chain: mc.c.Id, From: src.Id, To: dst.Id}
				}
			}
		}
	}
	return nil
}

// movableChain is a chain a target may move a replica out of now, with
// the failure domains its replacement must avoid.
type movableChain struct {
	c   *mgmtdpb.Chain
	dom map[string]bool
}

// movableChains are src's chains, in its order, that may start a move of
// src's replica now.
func (p *plan) movableChains(src *mgmtdpb.Target) []movableChain {
	var out []movableChain
	for _, cid := range src.Chains {
		c := p.chains[cid]
		if c == nil || movable(c) != "" || departing(c, src.Id) {
			continue
		}
		out = append(out, movableChain{c, p.domains(c, src.Id)})
	}
	return out
}

// ToGo counts the moves still to start on map m: those in flight are taken
// as done, and the planner's choices are played out, each move completing
// at once, until it has nothing left to do.
func ToGo(m *mgmtdpb.ClusterMap) int {
	m = proto.Clone(m).(*mgmtdpb.ClusterMap)
	finish := func() {
		for _, c := range m.Chains {
			if c.Move != nil {
				rc := routing.ChainFromMap(c)
				rc.Synced(routing.TargetID(c.Move.To))
				rc.Store(c)
				settleMove(m, c)
			}
		}
		settleLeaving(m)
	}
	finish()
	n := 0
	for range 1 << 20 { // a bound, never reached: every move lowers the imbalance
		p := newPlan(m, 1<<30, 1<<30)
		p.plan()
		if len(p.out) == 0 {
			break
		}
		n += len(p.out)
		finish()
	}
	return n
}
