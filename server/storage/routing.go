package storage

import (
	"fmt"
	"slices"
	"sync"

	"github.com/sluicefs/sluice/fabric"
)

// TargetID names a storage target (a directory on one node's disk).
type TargetID uint32

// ChainID names a replication chain.
type ChainID uint32

// TargetState is a target's place in the cluster's life cycle, as mgmtd
// decides it.
type TargetState int

const (
	Serving TargetState = iota + 1 // in its chain, serves reads and writes
	Syncing                        // at its chain's end, catching up; takes writes, serves no reads
	Offline                        // out of every chain
)

func (s TargetState) String() string {
	switch s {
	case Serving:
		return "serving"
	case Syncing:
		return "syncing"
	case Offline:
		return "offline"
	}
	return fmt.Sprintf("TargetState(%d)", int(s))
}

// Target is where a target lives and what state it is in.
type Target struct {
	ID    TargetID
	Node  fabric.NodeID
	State TargetState
}

// Chain is an ordered list of targets, head first. Its version changes
// whenever its membership or order does; every request carries the version
// it was routed with, and a target refuses any other.
type Chain struct {
	ID      ChainID
	Version uint64
	Targets []TargetID
}

// Routing is one version of the cluster's routing information.
type Routing struct {
	Version uint64
	Chains  map[ChainID]Chain
	Targets map[TargetID]Target
}

// RoutingProvider supplies the current routing and says when it changes.
// mgmtd is the real one; StaticRouting serves tests and the embedded
// cluster until mgmtd runs.
type RoutingProvider interface {
	// Routing returns the current routing; callers must not modify it.
	Routing() *Routing
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
}

// StaticRouting is a RoutingProvider changed by hand.
type StaticRouting struct {
	mu      sync.Mutex
	r       *Routing
	changed chan struct{}
}

// NewStaticRouting starts from r.
func NewStaticRouting(r *Routing) *StaticRouting {
	return &StaticRouting{r: r, changed: make(chan struct{})}
}

func (s *StaticRouting) Routing() *Routing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

func (s *StaticRouting) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Update replaces the routing with fn's edit of a copy and bumps its version.
func (s *StaticRouting) Update(fn func(r *Routing)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &Routing{Version: s.r.Version + 1, Chains: make(map[ChainID]Chain), Targets: make(map[TargetID]Target)}
	for id, c := range s.r.Chains {
		c.Targets = slices.Clone(c.Targets)
		r.Chains[id] = c
	}
	for id, t := range s.r.Targets {
		r.Targets[id] = t
	}
	fn(r)
	s.r = r
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetOffline takes target out of every chain it is in, bumping those chains'
// versions: what mgmtd does when a target's lease lapses.
func (s *StaticRouting) SetOffline(target TargetID) {
	s.Update(func(r *Routing) {
		t := r.Targets[target]
		t.State = Offline
		r.Targets[target] = t
		for id, c := range r.Chains {
			if i := slices.Index(c.Targets, target); i >= 0 {
				c.Targets = slices.Delete(c.Targets, i, i+1)
				c.Version++
				r.Chains[id] = c
			}
		}
	})
}

// position reports where target sits in chain c: its index, its successor
// (0 when it is the tail) and whether it is in the chain at all.
func (c Chain) position(target TargetID) (int, TargetID, bool) {
	i := slices.Index(c.Targets, target)
	if i < 0 {
		return -1, 0, false
	}
	if i+1 < len(c.Targets) {
		return i, c.Targets[i+1], true
	}
	return i, 0, true
}

// Tail is the chain's last target.
func (c Chain) Tail() TargetID {
	if len(c.Targets) == 0 {
		return 0
	}
	return c.Targets[len(c.Targets)-1]
}
