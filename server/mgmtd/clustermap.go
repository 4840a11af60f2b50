package mgmtd

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/errcode"
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// ErrBadCommand: a command the map cannot apply (unknown target, table
// exists, not enough nodes, ...).
var ErrBadCommand = fabric.NewError(errcode.BadCommand, "mgmtd: command refused")

// mapKey holds the whole map, one record: small (nodes, targets and chains
// number in the thousands) and changed rarely.
var mapKey = []byte("m")

// ClusterMap is the cluster map's state machine on a Pebble database shared
// with the namespace. Apply is deterministic; Raft applies commands one at
// a time.
type ClusterMap struct {
	db *pebble.DB

	mu      sync.Mutex
	changed chan struct{} // closed at the next change
}

// NewClusterMap uses db.
func NewClusterMap(db *pebble.DB) *ClusterMap {
	return &ClusterMap{db: db, changed: make(chan struct{})}
}

// Changed returns a channel closed at the map's next change on this replica.
func (c *ClusterMap) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Notify wakes the watchers; the state machine calls it after a snapshot
// restore replaced the map wholesale.
func (c *ClusterMap) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.changed)
	c.changed = make(chan struct{})
}

// Map returns the current map.
func (c *ClusterMap) Map() (*mgmtdpb.ClusterMap, error) {
	v, closer, err := c.db.Get(mapKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return &mgmtdpb.ClusterMap{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	m := &mgmtdpb.ClusterMap{}
	return m, proto.Unmarshal(v, m)
}

// Apply applies a command.
func (c *ClusterMap) Apply(cmd *mgmtdpb.Command) error {
	m, err := c.Map()
	if err != nil {
		return err
	}
	switch op := cmd.Op.(type) {
	case *mgmtdpb.Command_RegisterNode:
		err = registerNode(m, op.RegisterNode)
	case *mgmtdpb.Command_CreateTable:
		err = createTable(m, op.CreateTable)
	case *mgmtdpb.Command_TargetOffline:
		err = targetOffline(m, op.TargetOffline)
	case *mgmtdpb.Command_TargetRejoin:
		err = targetRejoin(m, op.TargetRejoin)
	case *mgmtdpb.Command_TargetSynced:
		err = targetSynced(m, op.TargetSynced)
	case *mgmtdpb.Command_TargetFull:
		err = targetFull(m, op.TargetFull)
	case *mgmtdpb.Command_MoveReplica:
		err = moveReplica(m, op.MoveReplica)
	case *mgmtdpb.Command_SetDraining:
		err = setDraining(m, op.SetDraining)
	case *mgmtdpb.Command_RetireTargets:
		err = retireTargets(m, op.RetireTargets)
	case *mgmtdpb.Command_SetRebalance:
		m.Rebalance = op.SetRebalance.GetOn()
	default:
		err = fmt.Errorf("%w: empty command", ErrBadCommand)
	}
	if err != nil {
		return err
	}
	settleLeaving(m)
	m.Version++
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if err := c.db.Set(mapKey, v, pebble.NoSync); err != nil {
		return err
	}
	c.Notify()
	return nil
}

func target(m *mgmtdpb.ClusterMap, id uint32) *mgmtdpb.Target {
	for _, t := range m.Targets {
		if t.Id == id {
			return t
		}
	}
	return nil
}

func chain(m *mgmtdpb.ClusterMap, id uint32) *mgmtdpb.Chain {
	for _, c := range m.Chains {
		if c.Id == id {
			return c
		}
	}
	return nil
}

func registerNode(m *mgmtdpb.ClusterMap, r *mgmtdpb.RegisterNode) error {
	if r.Node.GetId() == "" || r.Node.GetAddress() == "" {
		return fmt.Errorf("%w: a node needs an id and an address", ErrBadCommand)
	}
	found := false
	for _, n := range m.Nodes {
		if n.Id == r.Node.Id {
			n.Address, n.Rack, found = r.Node.Address, r.Node.Rack, true
		}
	}
	if !found {
		m.Nodes = append(m.Nodes, r.Node)
	}
	for _, id := range r.Targets {
		if t := target(m, id); t != nil && t.Node != r.Node.Id {
			return fmt.Errorf("%w: target %d belongs to node %s", ErrBadCommand, id, t.Node)
		}
	}
	for _, id := range r.Targets {
		t := target(m, id)
		if t == nil {
			m.Targets = append(m.Targets, &mgmtdpb.Target{Id: id, Node: r.Node.Id, State: mgmtdpb.TargetState_SERVING})
			continue
		}
		// A known target registering again was restarted. An offline one
		// comes back with its first heartbeat; one still in its chains
		// (restarted within its lease) goes back to be resynced.
		if t.State != mgmtdpb.TargetState_OFFLINE {
			eachChain(m, t, func(c *routing.Chain) bool { return c.Restart(routing.TargetID(id)) })
			settleTarget(m, t)
		}
	}
	return nil
}

// eachChain runs fn on each of t's chains, as storage sees a chain, and
// writes back the ones fn changed.
func eachChain(m *mgmtdpb.ClusterMap, t *mgmtdpb.Target, fn func(c *routing.Chain) bool) {
	for _, cid := range t.Chains {
		pc := chain(m, cid)
		if pc == nil {
			continue
		}
		c := routing.ChainFromMap(pc)
		if fn(&c) {
			c.Store(pc)
		}
	}
}

// settleTarget sets a live target's overall state: syncing while it
// catches up in any chain, else serving.
func settleTarget(m *mgmtdpb.ClusterMap, t *mgmtdpb.Target) {
	t.State = mgmtdpb.TargetState_SERVING
	for _, cid := range t.Chains {
		if c := chain(m, cid); c != nil && routing.ChainFromMap(c).State(routing.TargetID(t.Id)) == routing.Syncing {
			t.State = mgmtdpb.TargetState_SYNCING
		}
	}
}

func createTable(m *mgmtdpb.ClusterMap, r *mgmtdpb.CreateChainTable) error {
	for _, t := range m.Tables {
		if t.Id == r.Table {
			return fmt.Errorf("%w: chain table %d exists", ErrBadCommand, r.Table)
		}
	}
	var serving []*mgmtdpb.Target
	for _, t := range m.Targets {
		if t.State == mgmtdpb.TargetState_SERVING && !t.Draining {
			serving = append(serving, t)
		}
	}
	racks := map[string]string{}
	for _, n := range m.Nodes {
		if n.Rack != "" {
			racks[n.Id] = n.Rack
		}
	}
	var placed [][]uint32
	var err error
	switch r.Placement {
	case placementFirst:
		placed, err = placeFirst(serving, int(r.Replicas), int(r.Chains))
	case PlacementBalanced, PlacementSpread:
		placed, err = placeVersion(r.Placement, serving, racks, int(r.Replicas), int(r.Chains))
	default:
		err = fmt.Errorf("%w: placement algorithm %d is unknown to this build", ErrBadCommand, r.Placement)
	}
	if err != nil {
		return err
	}
	next := uint32(1)
	for _, c := range m.Chains {
		next = max(next, c.Id+1)
	}
	table := &mgmtdpb.ChainTable{Id: r.Table, Replicas: r.Replicas}
	for _, ts := range placed {
		c := &mgmtdpb.Chain{Id: next, Version: 1, Targets: ts, Table: r.Table}
		for range ts {
			c.States = append(c.States, mgmtdpb.TargetState_SERVING)
		}
		next++
		m.Chains = append(m.Chains, c)
		table.Chains = append(table.Chains, c.Id)
		for _, id := range ts {
			t := target(m, id)
			t.Chains = append(t.Chains, c.Id)
		}
	}
	m.Tables = append(m.Tables, table)
	return nil
}

func targetOffline(m *mgmtdpb.ClusterMap, id uint32) error {
	t := target(m, id)
	if t == nil {
		return fmt.Errorf("%w: no target %d", ErrBadCommand, id)
	}
	if t.State == mgmtdpb.TargetState_OFFLINE {
		return nil
	}
	t.State = mgmtdpb.TargetState_OFFLINE
	eachChain(m, t, func(c *routing.Chain) bool { return c.Leave(routing.TargetID(id)) })
	cancelMoves(m, t)
	return nil
}

func targetRejoin(m *mgmtdpb.ClusterMap, id uint32) error {
	t := target(m, id)
	if t == nil || t.State != mgmtdpb.TargetState_OFFLINE {
		return fmt.Errorf("%w: target %d is not offline", ErrBadCommand, id)
	}
	eachChain(m, t, func(c *routing.Chain) bool { c.Return(routing.TargetID(id)); return true })
	settleTarget(m, t)
	return nil
}

func targetSynced(m *mgmtdpb.ClusterMap, r *mgmtdpb.TargetSynced) error {
	t := target(m, r.Target)
	c := chain(m, r.Chain)
	if t == nil || c == nil || t.State == mgmtdpb.TargetState_OFFLINE {
		return fmt.Errorf("%w: target %d is not syncing in chain %d", ErrBadCommand, r.Target, r.Chain)
	}
	if r.ChainVer != 0 && r.ChainVer != c.Version {
		return fmt.Errorf("%w: chain %d is at version %d, the resync of target %d ran at %d", ErrBadCommand, r.Chain, c.Version, r.Target, r.ChainVer)
	}
	ok := false
	eachChain(m, &mgmtdpb.Target{Chains: []uint32{r.Chain}}, func(ch *routing.Chain) bool {
		ok = ch.Synced(routing.TargetID(r.Target))
		return ok
	})
	if !ok {
		return fmt.Errorf("%w: target %d is not syncing in chain %d", ErrBadCommand, r.Target, r.Chain)
	}
	settleTarget(m, t)
	settleMove(m, c)
	return nil
}

func targetFull(m *mgmtdpb.ClusterMap, r *mgmtdpb.TargetFull) error {
	t := target(m, r.Target)
	if t == nil {
		return fmt.Errorf("%w: no target %d", ErrBadCommand, r.Target)
	}
	t.Full = r.Full
	return nil
}
