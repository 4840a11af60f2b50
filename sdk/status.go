package sdk

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/routing"
)

// ClusterStatus is the cluster's state, for programs and people alike:
// `sluice status` formats it as text, and prints it as it is with --json.
// The SDK itself prints nothing.
type ClusterStatus struct {
	Meta MetaStatus `json:"meta"`
	// Usage is nil when the namespace could not be counted.
	Usage *Usage `json:"usage"`
	// MapVersion is the version of the cluster map Targets and Chains
	// come from.
	MapVersion uint64         `json:"map_version"`
	Targets    []TargetStatus `json:"targets"` // by id
	Chains     []ChainStatus  `json:"chains"`  // by id
	// Moves are the replica moves (drains, rebalance); nil when the
	// control plane did not say.
	Moves *MoveProgress `json:"moves"`
}

// MetaStatus is the metadata Raft group as the replica that answered sees it.
type MetaStatus struct {
	Leader       string   `json:"leader"`
	State        string   `json:"state"`
	AppliedIndex uint64   `json:"applied_index"`
	Inodes       uint64   `json:"inodes"`
	Members      []string `json:"members"`
}

// TargetStatus is one storage target.
type TargetStatus struct {
	ID      uint32 `json:"id"`
	Node    string `json:"node"`    // the storage node's id
	Address string `json:"address"` // its fabric address
	// State is overall: offline while its lease has lapsed, else syncing
	// if it catches up in any chain, else serving.
	State string `json:"state"`
	// Full: its disk is (nearly) out of space; writes to its chains fail
	// fast with ErrNoSpace until it has room.
	Full bool `json:"full"`
	// Draining: its replicas are being moved elsewhere (sluice admin
	// drain); it takes no new ones.
	Draining bool `json:"draining"`
	// Chains are the chains it belongs to, by id, with its state in each
	// ("out" for one it has left while offline).
	Chains []ChainMember `json:"chains"`
	// Space is its disk as its last heartbeat reported it; nil when the
	// metadata leader holds no current report (the target is offline, or
	// the leader is new).
	Space *TargetSpace `json:"space"`
}

// ChainMember is a target's place in one chain.
type ChainMember struct {
	Chain uint32 `json:"chain"`
	State string `json:"state"`
}

// TargetSpace is one target's disk.
type TargetSpace struct {
	Target     uint32 `json:"-"`
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
}

// ChainStatus is one chain: its targets head first, with their states in it.
type ChainStatus struct {
	ID      uint32        `json:"id"`
	Version uint64        `json:"version"`
	Targets []ChainTarget `json:"targets"`
	// Leaving are members a replica move replaced, kept until the chain
	// has its full number of serving replicas besides them.
	Leaving []uint32 `json:"leaving,omitempty"`
}

// ChainTarget is one target of a chain, with its state there.
type ChainTarget struct {
	Target uint32 `json:"target"`
	State  string `json:"state"`
}

// ClusterStatus gathers the cluster's state: the metadata group, the
// namespace's usage, and every target and chain as the cluster map has
// them (mgmtd's, read from the leader), each target with its disk space
// as the leader last heard it (Statfs).
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	cctx, done := c.call(ctx)
	defer done()
	st, err := c.meta.Status(cctx, &metapb.StatusRequest{})
	if err != nil {
		return nil, fsErr("status", "", err)
	}
	m, err := mgmtdpb.NewMgmtdClient(c.conn).GetClusterMap(cctx, &mgmtdpb.Empty{})
	if err != nil {
		return nil, fmt.Errorf("status: cluster map: %w", err)
	}
	out := &ClusterStatus{Meta: MetaStatus{Leader: st.Leader, State: st.State, AppliedIndex: st.AppliedIndex,
		Inodes: st.Inodes, Members: st.Members}, MapVersion: m.Version}
	space := map[uint32]TargetSpace{}
	if u, err := c.Statfs(ctx); err == nil {
		out.Usage = &u
		for _, sp := range u.TargetSpace {
			space[sp.Target] = sp
		}
	}
	addr := map[string]string{}
	for _, n := range m.Nodes {
		addr[n.Id] = n.Address
	}
	// inChain[chain][target] is the target's state in the chain.
	inChain := map[uint32]map[uint32]string{}
	for _, ch := range m.Chains {
		cs := ChainStatus{ID: ch.Id, Version: ch.Version, Targets: []ChainTarget{}, Leaving: ch.Leaving}
		inChain[ch.Id] = map[uint32]string{}
		rc := routing.ChainFromMap(ch) // each member's state, as storage reads it
		for _, t := range rc.Targets {
			state := rc.State(t).String()
			cs.Targets = append(cs.Targets, ChainTarget{Target: uint32(t), State: state})
			inChain[ch.Id][uint32(t)] = state
		}
		out.Chains = append(out.Chains, cs)
	}
	slices.SortFunc(out.Chains, func(a, b ChainStatus) int { return cmp.Compare(a.ID, b.ID) })
	for _, t := range m.Targets {
		ts := TargetStatus{ID: t.Id, Node: t.Node, Address: addr[t.Node], State: stateName(t.State), Full: t.Full, Draining: t.Draining, Chains: []ChainMember{}}
		chains := slices.Clone(t.Chains)
		for id, members := range inChain {
			if _, ok := members[t.Id]; ok && !slices.Contains(chains, id) {
				chains = append(chains, id)
			}
		}
		slices.Sort(chains)
		for _, id := range chains {
			state, ok := inChain[id][t.Id]
			if !ok {
				state = "out" // it belongs to the chain but has left it
			}
			ts.Chains = append(ts.Chains, ChainMember{Chain: id, State: state})
		}
		if sp, ok := space[t.Id]; ok {
			ts.Space = &sp
		}
		out.Targets = append(out.Targets, ts)
	}
	slices.SortFunc(out.Targets, func(a, b TargetStatus) int { return cmp.Compare(a.ID, b.ID) })
	if p, err := c.Moves(ctx); err == nil {
		out.Moves = &p
	}
	return out, nil
}

// stateName is a target state as status shows it: serving, syncing,
// offline.
func stateName(s mgmtdpb.TargetState) string { return strings.ToLower(s.String()) }
