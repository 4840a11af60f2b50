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
// in sync and serves, the replaced replica leaves the chain and the chain
// is as many replicas strong as before. A new target that dies first is
// dropped and the move cancelled (the replaced one never left); a replaced
// one that dies first leaves as any dead replica does, and the move goes
// on from the others. At most one move runs per chain.

// domains are the failure domains of the targets that belong to chain c,
// in it right now or not (an offline one may come back), but for the
// replica a move replaces (except): its replacement may take its place in
// its domain, as a move within a rack must when there are as many racks
// as replicas. For the move's length the chain holds one replica more,
// never fewer domains.
func domains(m *mgmtdpb.ClusterMap, c *mgmtdpb.Chain, except uint32) map[string]bool {
	racks := map[string]string{}
	for _, n := range m.Nodes {
		racks[n.Id] = n.Rack
	}
	out := map[string]bool{}
	for _, t := range m.Targets {
		if t.Id != except && (slices.Contains(t.Chains, c.Id) || slices.Contains(c.Targets, t.Id)) {
			out[FailureDomain(t.Node, racks[t.Node])] = true
		}
	}
	return out
}

// eligible reports whether t may take a new replica of chain c: it is
// live, neither draining nor full, not in the chain, and its failure
// domain is none of the chain's (dom).
func eligible(m *mgmtdpb.ClusterMap, t *mgmtdpb.Target, c *mgmtdpb.Chain, dom map[string]bool) bool {
	if t.State == mgmtdpb.TargetState_OFFLINE || t.Draining || t.Full || slices.Contains(t.Chains, c.Id) || slices.Contains(c.Targets, t.Id) {
		return false
	}
	rack := ""
	for _, n := range m.Nodes {
		if n.Id == t.Node {
			rack = n.Rack
		}
	}
	return !dom[FailureDomain(t.Node, rack)]
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

func moveReplica(m *mgmtdpb.ClusterMap, mv *mgmtdpb.Move) error {
	c := chain(m, mv.GetChain())
	from, to := target(m, mv.GetFrom()), target(m, mv.GetTo())
	switch {
	case c == nil:
		return fmt.Errorf("%w: move: no chain %d", ErrBadCommand, mv.GetChain())
	case from == nil || !slices.Contains(from.Chains, c.Id):
		return fmt.Errorf("%w: move: target %d is not in chain %d", ErrBadCommand, mv.GetFrom(), c.Id)
	case to == nil:
		return fmt.Errorf("%w: move: no target %d", ErrBadCommand, mv.GetTo())
	}
	if why := movable(c); why != "" {
		return fmt.Errorf("%w: move: %s", ErrBadCommand, why)
	}
	if !eligible(m, to, c, domains(m, c, from.Id)) {
		return fmt.Errorf("%w: move: target %d cannot join chain %d (offline, draining, full, or in a failure domain the chain has)", ErrBadCommand, to.Id, c.Id)
	}
	rc := routing.ChainFromMap(c)
	rc.Version++
	rc.Targets = append(rc.Targets, routing.TargetID(to.Id))
	rc.States = append(rc.States, routing.Syncing)
	rc.Store(c)
	c.Move = &mgmtdpb.Move{Chain: c.Id, From: from.Id, To: to.Id}
	to.Chains = append(to.Chains, c.Id)
	settleTarget(m, to)
	return nil
}

// settleMove finishes chain c's move once its new target serves there:
// the replaced one leaves the chain (if it is still in it) and its list.
// It runs wherever a chain may change (targetSynced).
func settleMove(m *mgmtdpb.ClusterMap, c *mgmtdpb.Chain) {
	if c.Move == nil || routing.ChainFromMap(c).State(routing.TargetID(c.Move.To)) != routing.Serving {
		return
	}
	from := target(m, c.Move.From)
	c.Move = nil
	m.MovesDone++
	if from == nil {
		return
	}
	rc := routing.ChainFromMap(c)
	if i := slices.Index(rc.Targets, routing.TargetID(from.Id)); i >= 0 {
		rc.Targets = slices.Delete(rc.Targets, i, i+1)
		rc.States = slices.Delete(rc.States, i, i+1)
		rc.Version++
		rc.Store(c)
	}
	from.Chains = slices.DeleteFunc(from.Chains, func(id uint32) bool { return id == c.Id })
	if from.State != mgmtdpb.TargetState_OFFLINE {
		settleTarget(m, from)
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
	// Every chain of a draining target needs somewhere to go: refuse a
	// drain that could never finish.
	for _, id := range r.Targets {
		for _, cid := range target(m, id).Chains {
			c := chain(m, cid)
			if c == nil || c.Move != nil && c.Move.From == id {
				continue
			}
			dom, ok := domains(m, c, id), false
			for _, t := range m.Targets {
				if eligible(m, t, c, dom) {
					ok = true
					break
				}
			}
			if !ok {
				return fmt.Errorf("%w: drain target %d: no live, non-draining target outside chain %d's failure domains can take its replica", ErrBadCommand, id, cid)
			}
		}
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
