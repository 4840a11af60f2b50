package mgmtd

import (
	"fmt"
	"slices"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// Replica moves. Drain, replace and rebalance are all one change: a move
// appends a new target to a chain as syncing, at its end, and records the
// replica it replaces (Chain.move). The storage nodes resync the new
// target from its predecessor as they do a returning one; once it reports
// in sync and serves, the move is done and the replaced replica is leaving
// (Chain.leaving): it stays in the chain, serving, until the chain has its
// table's number of serving replicas besides the leaving ones, so a chain
// that lost another replica meanwhile keeps it (settleLeaving, checked
// after every command). A new target that dies first is dropped and the
// move cancelled (the replaced one never left); a replaced one that dies
// leaves as any dead replica does, and for good. At most one move runs per
// chain at a time.

// view indexes a map for the move rules, so that planning over thousands
// of targets and chains stays linear: each node's failure domain, targets
// and chains by id, and each chain's members (the targets in it, and those
// that belong to it while out of it: an offline one may come back). A
// view's methods keep it in step with the changes they make to the map.
type view struct {
	m       *mgmtdpb.ClusterMap
	domain  map[string]string // node -> failure domain
	targets map[uint32]*mgmtdpb.Target
	chains  map[uint32]*mgmtdpb.Chain
	members map[uint32][]uint32 // chain -> targets
}

func newView(m *mgmtdpb.ClusterMap) *view {
	v := &view{m: m, domain: map[string]string{}, targets: map[uint32]*mgmtdpb.Target{}, chains: map[uint32]*mgmtdpb.Chain{}, members: map[uint32][]uint32{}}
	for _, n := range m.Nodes {
		v.domain[n.Id] = FailureDomain(n.Id, n.Rack)
	}
	for _, c := range m.Chains {
		v.chains[c.Id] = c
		v.members[c.Id] = slices.Clone(c.Targets)
	}
	for _, t := range m.Targets {
		v.targets[t.Id] = t
		for _, cid := range t.Chains {
			if !slices.Contains(v.members[cid], t.Id) {
				v.members[cid] = append(v.members[cid], t.Id)
			}
		}
	}
	return v
}

func (v *view) domainOf(t *mgmtdpb.Target) string {
	if d, ok := v.domain[t.Node]; ok {
		return d
	}
	return FailureDomain(t.Node, "")
}

// departing reports whether target id is on its way out of chain c: the
// replica its move replaces, or leaving.
func departing(c *mgmtdpb.Chain, id uint32) bool {
	return c.Move != nil && c.Move.From == id || slices.Contains(c.Leaving, id)
}

// domains are the failure domains of chain c's members but for the
// replica a move replaces (except) and those leaving: a replacement may
// take its place in its domain, as a move within a rack must when there
// are as many racks as replicas. For the move's length the chain holds
// one replica more, never fewer domains.
func (v *view) domains(c *mgmtdpb.Chain, except uint32) map[string]bool {
	out := map[string]bool{}
	for _, id := range v.members[c.Id] {
		if t := v.targets[id]; t != nil && id != except && !slices.Contains(c.Leaving, id) {
			out[v.domainOf(t)] = true
		}
	}
	return out
}

// eligible reports whether t may take a new replica of chain c: it is
// live, neither draining nor full, not a member, and its failure domain
// is none of the chain's (dom).
func (v *view) eligible(t *mgmtdpb.Target, c *mgmtdpb.Chain, dom map[string]bool) bool {
	return t.State != mgmtdpb.TargetState_OFFLINE && !t.Draining && !t.Full &&
		!slices.Contains(v.members[c.Id], t.Id) && !dom[v.domainOf(t)]
}

// movable reports why chain c cannot start a move now ("" when it can): a
// move already runs, or no replica serves to resync a new one from.
func movable(c *mgmtdpb.Chain) string {
	if c.Move != nil {
		return fmt.Sprintf("chain %d is already moving target %d to %d", c.Id, c.Move.From, c.Move.To)
	}
	if len(routing.ChainFromMap(c).Serving()) == 0 {
		return fmt.Sprintf("chain %d has no serving replica to copy from", c.Id)
	}
	return ""
}

func moveReplica(m *mgmtdpb.ClusterMap, mv *mgmtdpb.Move) error { return newView(m).start(mv) }

// start starts move mv, or says why it may not.
func (v *view) start(mv *mgmtdpb.Move) error {
	c := v.chains[mv.GetChain()]
	from, to := v.targets[mv.GetFrom()], v.targets[mv.GetTo()]
	switch {
	case c == nil:
		return fmt.Errorf("%w: move: no chain %d", ErrBadCommand, mv.GetChain())
	case from == nil || !slices.Contains(from.Chains, c.Id):
		return fmt.Errorf("%w: move: target %d is not in chain %d", ErrBadCommand, mv.GetFrom(), c.Id)
	case slices.Contains(c.Leaving, from.Id):
		return fmt.Errorf("%w: move: target %d is leaving chain %d already", ErrBadCommand, from.Id, c.Id)
	case to == nil:
		return fmt.Errorf("%w: move: no target %d", ErrBadCommand, mv.GetTo())
	}
	if why := movable(c); why != "" {
		return fmt.Errorf("%w: move: %s", ErrBadCommand, why)
	}
	if !v.eligible(to, c, v.domains(c, from.Id)) {
		return fmt.Errorf("%w: move: target %d cannot join chain %d (offline, draining, full, or in a failure domain the chain has)", ErrBadCommand, to.Id, c.Id)
	}
	rc := routing.ChainFromMap(c)
	rc.Version++
	rc.Targets = append(rc.Targets, routing.TargetID(to.Id))
	rc.States = append(rc.States, routing.Syncing)
	rc.Store(c)
	c.Move = &mgmtdpb.Move{Chain: c.Id, From: from.Id, To: to.Id}
	to.Chains = append(to.Chains, c.Id)
	to.State = mgmtdpb.TargetState_SYNCING // live (eligible), and syncing in c
	v.members[c.Id] = append(v.members[c.Id], to.Id)
	return nil
}

// settleMove finishes chain c's move once its new target serves there:
// the replaced one is leaving (if it still belongs to the chain).
func settleMove(m *mgmtdpb.ClusterMap, c *mgmtdpb.Chain) {
	if c.Move == nil || routing.ChainFromMap(c).State(routing.TargetID(c.Move.To)) != routing.Serving {
		return
	}
	if from := target(m, c.Move.From); from != nil && slices.Contains(from.Chains, c.Id) {
		c.Leaving = append(c.Leaving, from.Id)
	}
	c.Move = nil
	m.MovesDone++
}

// settleLeaving takes the leaving replicas out of every chain that has
// its table's number of serving replicas besides them, and out of any
// chain a leaving one no longer serves in (it died: it is not waited
// for). A leaving replica kept as the chain's last serving one, offline,
// stays. The state machine runs it after every command.
func settleLeaving(m *mgmtdpb.ClusterMap) {
	var replicas map[uint32]int // table -> replicas, once a chain has leaving ones
	for _, c := range m.Chains {
		if len(c.Leaving) == 0 {
			continue
		}
		if replicas == nil {
			replicas = make(map[uint32]int, len(m.Tables))
			for _, t := range m.Tables {
				replicas[t.Id] = int(t.Replicas)
			}
		}
		rc := routing.ChainFromMap(c)
		staying := 0
		for _, id := range rc.Serving() {
			if !slices.Contains(c.Leaving, uint32(id)) {
				staying++
			}
		}
		for _, id := range slices.Clone(c.Leaving) {
			i := slices.Index(rc.Targets, routing.TargetID(id))
			if i >= 0 && staying < replicas[c.Table] && rc.States[i] != routing.Syncing {
				continue // still needed (serving, or kept offline as the last)
			}
			if i >= 0 {
				rc.Targets = slices.Delete(rc.Targets, i, i+1)
				rc.States = slices.Delete(rc.States, i, i+1)
				rc.Version++
				rc.Store(c)
			}
			c.Leaving = slices.DeleteFunc(c.Leaving, func(x uint32) bool { return x == id })
			if t := target(m, id); t != nil {
				t.Chains = slices.DeleteFunc(t.Chains, func(x uint32) bool { return x == c.Id })
				if t.State != mgmtdpb.TargetState_OFFLINE {
					settleTarget(m, t)
				}
			}
		}
	}
}

// cancelMoves drops target t, gone offline, from the chains it was joining:
// it has already left them (a syncing replica leaves when its lease
// lapses); the replicas it was to replace stay.
func cancelMoves(m *mgmtdpb.ClusterMap, t *mgmtdpb.Target) {
	for _, c := range m.Chains {
		if c.Move == nil || c.Move.To != t.Id {
			continue
		}
		c.Move = nil
		m.MovesCancelled++
		t.Chains = slices.DeleteFunc(t.Chains, func(id uint32) bool { return id == c.Id })
	}
}

func setDraining(m *mgmtdpb.ClusterMap, r *mgmtdpb.SetDraining) error {
	if len(r.Targets) == 0 {
		return fmt.Errorf("%w: drain: no targets named", ErrBadCommand)
	}
	for _, id := range r.Targets {
		if target(m, id) == nil {
			return fmt.Errorf("%w: drain: no target %d", ErrBadCommand, id)
		}
	}
	for _, id := range r.Targets {
		target(m, id).Draining = r.Draining
	}
	if !r.Draining {
		return nil
	}
	// Every draining replica of a chain needs a replacement of its own, in
	// a failure domain of its own: refuse a drain that could never finish.
	v := newView(m)
	for _, id := range r.Targets {
		for _, cid := range v.targets[id].Chains {
			if c := v.chains[cid]; c != nil {
				if err := v.drainable(c); err != nil {
					return fmt.Errorf("%w: drain target %d: %w", ErrBadCommand, id, err)
				}
			}
		}
	}
	return nil
}

// drainable says why chain c's draining replicas could never all be
// replaced (nil when they can): the live, non-draining, non-full targets
// outside the failure domains of its staying replicas span fewer domains
// than it has draining replicas not yet being replaced.
func (v *view) drainable(c *mgmtdpb.Chain) error {
	stay, need := map[string]bool{}, 0
	for _, id := range v.members[c.Id] {
		t := v.targets[id]
		switch {
		case t == nil:
		case !t.Draining:
			stay[v.domainOf(t)] = true
		case !departing(c, id):
			need++
		}
	}
	free := map[string]bool{}
	for _, t := range v.m.Targets {
		if v.eligible(t, c, stay) {
			free[v.domainOf(t)] = true
		}
	}
	if len(free) < need {
		return fmt.Errorf("chain %d has %d draining replica(s) to replace and live, non-draining targets in only %d failure domain(s) it lacks", c.Id, need, len(free))
	}
	return nil
}

func retireTargets(m *mgmtdpb.ClusterMap, r *mgmtdpb.RetireTargets) error {
	for _, id := range r.Targets {
		t := target(m, id)
		switch {
		case t == nil:
			continue // retired already
		case !t.Draining:
			return fmt.Errorf("%w: retire target %d: it is not draining (sluice admin drain first)", ErrBadCommand, id)
		case len(t.Chains) > 0:
			return fmt.Errorf("%w: retire target %d: still in chains %v (the drain goes on)", ErrBadCommand, id, t.Chains)
		}
	}
	var nodes []string
	m.Targets = slices.DeleteFunc(m.Targets, func(t *mgmtdpb.Target) bool {
		if slices.Contains(r.Targets, t.Id) {
			nodes = append(nodes, t.Node)
			return true
		}
		return false
	})
	m.Nodes = slices.DeleteFunc(m.Nodes, func(n *mgmtdpb.Node) bool {
		return slices.Contains(nodes, n.Id) && !slices.ContainsFunc(m.Targets, func(t *mgmtdpb.Target) bool { return t.Node == n.Id })
	})
	return nil
}
