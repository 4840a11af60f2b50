package routing

import (
	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

var (
	stateFromMap = map[mgmtdpb.TargetState]TargetState{
		mgmtdpb.TargetState_SERVING: Serving, mgmtdpb.TargetState_SYNCING: Syncing, mgmtdpb.TargetState_OFFLINE: Offline,
	}
	stateToMap = map[TargetState]mgmtdpb.TargetState{
		Serving: mgmtdpb.TargetState_SERVING, Syncing: mgmtdpb.TargetState_SYNCING, Offline: mgmtdpb.TargetState_OFFLINE,
	}
)

// ChainFromMap is a chain of the cluster map as routing sees it.
func ChainFromMap(c *mgmtdpb.Chain) Chain {
	ch := Chain{ID: ChainID(c.Id), Version: c.Version}
	for i, t := range c.Targets {
		st := Serving // a map from before per-chain states
		if i < len(c.States) {
			st = stateFromMap[c.States[i]]
		}
		ch.Targets = append(ch.Targets, TargetID(t))
		ch.States = append(ch.States, st)
	}
	return ch
}

// Store writes c's members, states and version into the map's chain pc.
func (c Chain) Store(pc *mgmtdpb.Chain) {
	pc.Version, pc.Targets, pc.States = c.Version, pc.Targets[:0], pc.States[:0]
	for _, id := range c.Targets {
		pc.Targets = append(pc.Targets, uint32(id))
		pc.States = append(pc.States, stateToMap[c.State(id)])
	}
}

// FromMap converts mgmtd's cluster map into what storage nodes and clients
// route by.
func FromMap(m *mgmtdpb.ClusterMap) *Routing {
	r := &Routing{Version: m.Version, Chains: map[ChainID]Chain{}, Targets: map[TargetID]Target{}}
	addr := map[string]fabric.NodeID{}
	for _, n := range m.Nodes {
		addr[n.Id] = fabric.NodeID(n.Address)
	}
	for _, t := range m.Targets {
		tg := Target{ID: TargetID(t.Id), Node: addr[t.Node], State: stateFromMap[t.State], Full: t.Full, Chains: []ChainID{}}
		for _, c := range t.Chains {
			tg.Chains = append(tg.Chains, ChainID(c))
		}
		r.Targets[tg.ID] = tg
	}
	for _, c := range m.Chains {
		ch := ChainFromMap(c)
		r.Chains[ch.ID] = ch
	}
	return r
}
