package mgmtd

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/storage"
)

// ErrBadCommand: a command the map cannot apply (unknown target, table
// exists, not enough nodes, ...).
var ErrBadCommand = fabric.NewError(fabric.FirstAppCode+200, "mgmtd: command refused")

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
	default:
		err = fmt.Errorf("%w: empty command", ErrBadCommand)
	}
	if err != nil {
		return err
	}
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
			n.Address, found = r.Node.Address, true
		}
	}
	if !found {
		m.Nodes = append(m.Nodes, r.Node)
	}
	for _, id := range r.Targets {
		if t := target(m, id); t != nil {
			if t.Node != r.Node.Id {
				return fmt.Errorf("%w: target %d belongs to node %s", ErrBadCommand, id, t.Node)
			}
			continue
		}
		m.Targets = append(m.Targets, &mgmtdpb.Target{Id: id, Node: r.Node.Id, State: mgmtdpb.TargetState_SERVING})
	}
	return nil
}

func createTable(m *mgmtdpb.ClusterMap, r *mgmtdpb.CreateChainTable) error {
	for _, t := range m.Tables {
		if t.Id == r.Table {
			return fmt.Errorf("%w: chain table %d exists", ErrBadCommand, r.Table)
		}
	}
	var serving []*mgmtdpb.Target
	for _, t := range m.Targets {
		if t.State == mgmtdpb.TargetState_SERVING {
			serving = append(serving, t)
		}
	}
	placed, err := Place(serving, int(r.Replicas), int(r.Chains))
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
	t.State, t.Synced = mgmtdpb.TargetState_OFFLINE, nil
	for _, cid := range t.Chains {
		c := chain(m, cid)
		if i := slices.Index(c.Targets, id); i >= 0 {
			c.Targets = slices.Delete(c.Targets, i, i+1)
			c.Version++
		}
	}
	return nil
}

func targetRejoin(m *mgmtdpb.ClusterMap, id uint32) error {
	t := target(m, id)
	if t == nil || t.State != mgmtdpb.TargetState_OFFLINE {
		return fmt.Errorf("%w: target %d is not offline", ErrBadCommand, id)
	}
	t.State, t.Synced = mgmtdpb.TargetState_SYNCING, nil
	if len(t.Chains) == 0 {
		t.State = mgmtdpb.TargetState_SERVING // in no chain: nothing to catch up on
	}
	for _, cid := range t.Chains {
		c := chain(m, cid)
		c.Targets = append(c.Targets, id)
		c.Version++
	}
	return nil
}

func targetSynced(m *mgmtdpb.ClusterMap, r *mgmtdpb.TargetSynced) error {
	t := target(m, r.Target)
	if t == nil || t.State != mgmtdpb.TargetState_SYNCING || !slices.Contains(t.Chains, r.Chain) {
		return fmt.Errorf("%w: target %d is not syncing in chain %d", ErrBadCommand, r.Target, r.Chain)
	}
	if !slices.Contains(t.Synced, r.Chain) {
		t.Synced = append(t.Synced, r.Chain)
	}
	if len(t.Synced) == len(t.Chains) {
		t.State, t.Synced = mgmtdpb.TargetState_SERVING, nil
		for _, cid := range t.Chains {
			chain(m, cid).Version++
		}
	}
	return nil
}

// Routing converts the map into what storage nodes and clients route by.
func Routing(m *mgmtdpb.ClusterMap) *storage.Routing {
	r := &storage.Routing{Version: m.Version, Chains: map[storage.ChainID]storage.Chain{}, Targets: map[storage.TargetID]storage.Target{}}
	addr := map[string]fabric.NodeID{}
	for _, n := range m.Nodes {
		addr[n.Id] = fabric.NodeID(n.Address)
	}
	states := map[mgmtdpb.TargetState]storage.TargetState{
		mgmtdpb.TargetState_SERVING: storage.Serving, mgmtdpb.TargetState_SYNCING: storage.Syncing, mgmtdpb.TargetState_OFFLINE: storage.Offline,
	}
	for _, t := range m.Targets {
		r.Targets[storage.TargetID(t.Id)] = storage.Target{ID: storage.TargetID(t.Id), Node: addr[t.Node], State: states[t.State]}
	}
	for _, c := range m.Chains {
		ch := storage.Chain{ID: storage.ChainID(c.Id), Version: c.Version}
		for _, t := range c.Targets {
			ch.Targets = append(ch.Targets, storage.TargetID(t))
		}
		r.Chains[ch.ID] = ch
	}
	return r
}

// Place chooses replicas targets, on distinct nodes, for each of chains
// chains: each chain takes the least-loaded nodes, breaking ties by how
// rarely they already share chains with the nodes chosen so far, so that
// when a node fails the recovery reads spread evenly over the others; and
// on each node the least-loaded target.
func Place(targets []*mgmtdpb.Target, replicas, chains int) ([][]uint32, error) {
	byNode := map[string][]uint32{}
	for _, t := range targets {
		byNode[t.Node] = append(byNode[t.Node], t.Id)
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
		sort.Slice(byNode[n], func(i, j int) bool { return byNode[n][i] < byNode[n][j] })
	}
	sort.Strings(nodes)
	if replicas < 1 || replicas > len(nodes) || chains < 1 {
		return nil, fmt.Errorf("%w: %d replicas on %d nodes, %d chains", ErrBadCommand, replicas, len(nodes), chains)
	}
	nodeLoad := map[string]int{}
	targetLoad := map[uint32]int{}
	pair := map[[2]string]int{}
	out := make([][]uint32, 0, chains)
	for i := 0; i < chains; i++ {
		var chosen []string
		for k := 0; k < replicas; k++ {
			best := ""
			for _, n := range nodes {
				if slices.Contains(chosen, n) {
					continue
				}
				if best == "" || better(n, best, chosen, nodeLoad, pair) {
					best = n
				}
			}
			chosen = append(chosen, best)
		}
		var ts []uint32
		for k, n := range chosen {
			t := byNode[n][0]
			for _, c := range byNode[n] {
				if targetLoad[c] < targetLoad[t] {
					t = c
				}
			}
			ts = append(ts, t)
			targetLoad[t]++
			nodeLoad[n]++
			for _, o := range chosen[:k] {
				pair[pairKey(n, o)]++
			}
		}
		out = append(out, ts)
	}
	return out, nil
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// better reports whether node a should be chosen over b next.
func better(a, b string, chosen []string, load map[string]int, pair map[[2]string]int) bool {
	if load[a] != load[b] {
		return load[a] < load[b]
	}
	pa, pb := 0, 0
	for _, c := range chosen {
		pa += pair[pairKey(a, c)]
		pb += pair[pairKey(b, c)]
	}
	if pa != pb {
		return pa < pb
	}
	return a < b
}
