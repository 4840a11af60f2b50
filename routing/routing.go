package routing

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

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

// Target is where a target lives and what state it is in overall: offline
// while its lease has lapsed, else syncing if it is catching up in any of
// its chains, else serving. What a target may do in a chain is its state in
// that chain (Chain.State).
type Target struct {
	ID    TargetID
	Node  fabric.NodeID
	State TargetState
	// Full: its disk has no room for another chunk; writes to its chains
	// fail fast with ErrNoSpace until it has.
	Full bool
	// Chains are the chains it belongs to, in them right now or not (one
	// it left while offline stays; one a replica move took it out of
	// goes), as mgmtd's map has them; nil in routing from elsewhere.
	Chains []ChainID `json:",omitempty"`
}

// Chain is an ordered list of targets, head first, with each one's state
// in the chain (States[i] is Targets[i]'s). Its version changes whenever
// its membership, order or states do; every request carries the version
// it was routed with, and a target refuses any other.
type Chain struct {
	ID      ChainID
	Version uint64
	Targets []TargetID
	States  []TargetState
}

// Routing is one version of the cluster's routing information.
type Routing struct {
	Version uint64
	Chains  map[ChainID]Chain
	Targets map[TargetID]Target
}

// Provider supplies the current routing and says when it changes.
// mgmtd is the real one; StaticRouting serves tests and the embedded
// cluster until mgmtd runs.
type Provider interface {
	// Routing returns the current routing; callers must not modify it.
	Routing() *Routing
	// Changed returns a channel closed at the next change.
	Changed() <-chan struct{}
}

// StaticRouting is a Provider changed by hand.
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
	r := s.r.Next()
	fn(r)
	s.r = r
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetOffline takes target out of every chain it is in (see Routing.SetOffline).
func (s *StaticRouting) SetOffline(target TargetID) {
	s.Update(func(r *Routing) { r.SetOffline(target) })
}

// Next returns a deep copy of r with the next version number, to edit.
func (r *Routing) Next() *Routing {
	n := &Routing{Version: r.Version + 1, Chains: make(map[ChainID]Chain), Targets: make(map[TargetID]Target)}
	for id, c := range r.Chains {
		c.Targets = slices.Clone(c.Targets)
		c.States = slices.Clone(c.States)
		n.Chains[id] = c
	}
	for id, t := range r.Targets {
		n.Targets[id] = t
	}
	return n
}

// SetOffline is what mgmtd does when target's lease lapses: it leaves each
// of its chains (Chain.Leave) and is offline.
func (r *Routing) SetOffline(target TargetID) {
	t := r.Targets[target]
	t.State = Offline
	r.Targets[target] = t
	for id, c := range r.Chains {
		if c.Leave(target) {
			r.Chains[id] = c
		}
	}
}

// Rejoin brings an offline target back into chain (Chain.Return).
func (r *Routing) Rejoin(chain ChainID, target TargetID) {
	c := r.Chains[chain]
	c.Return(target)
	r.Chains[chain] = c
	r.Targets[target] = r.settle(r.Targets[target])
}

// SetServing lets a target that finished syncing in chain serve there.
func (r *Routing) SetServing(chain ChainID, target TargetID) {
	c := r.Chains[chain]
	c.Synced(target)
	r.Chains[chain] = c
	r.Targets[target] = r.settle(r.Targets[target])
}

// settle recomputes a live target's overall state from its chain states.
func (r *Routing) settle(t Target) Target {
	t.State = Serving
	for _, c := range r.Chains {
		if c.State(t.ID) == Syncing {
			t.State = Syncing
		}
	}
	return t
}

// State is target's state in the chain (0 when it is not in it). Chains
// from before per-chain states (no States) count every member as serving.
func (c Chain) State(target TargetID) TargetState {
	i := slices.Index(c.Targets, target)
	switch {
	case i < 0:
		return 0
	case i >= len(c.States):
		return Serving
	}
	return c.States[i]
}

// fill gives every member a state (serving where none was recorded).
func (c *Chain) fill() {
	for len(c.States) < len(c.Targets) {
		c.States = append(c.States, Serving)
	}
}

// Serving lists the chain's serving targets, head first.
func (c Chain) Serving() []TargetID {
	var out []TargetID
	for _, t := range c.Targets {
		if c.State(t) == Serving {
			out = append(out, t)
		}
	}
	return out
}

// Leave takes target out of the chain when its lease lapses, unless it is
// the chain's last serving replica: that one stays, offline, as the
// chain's source of truth, and the chain serves nothing until it returns
// (as in 3FS), since every acknowledged write is on it and perhaps on no
// other. It reports whether the chain changed.
func (c *Chain) Leave(target TargetID) bool {
	c.fill()
	i := slices.Index(c.Targets, target)
	if i < 0 || c.States[i] == Offline {
		return false
	}
	c.Version++
	if c.States[i] == Serving && len(c.Serving()) == 1 {
		c.States[i] = Offline
		return true
	}
	c.Targets = slices.Delete(c.Targets, i, i+1)
	c.States = slices.Delete(c.States, i, i+1)
	return true
}

// Return brings target back after its lease lapsed: where it was kept as
// the last serving replica it serves again; elsewhere it joins the chain's
// end, syncing.
func (c *Chain) Return(target TargetID) {
	c.fill()
	c.Version++
	if i := slices.Index(c.Targets, target); i >= 0 {
		if c.States[i] == Offline {
			c.States[i] = Serving
		}
		return
	}
	c.Targets = append(c.Targets, target)
	c.States = append(c.States, Syncing)
}

// Restart is a target that started again while still in the chain (a
// restart within its lease): it may have missed what happened while it was
// down, so it goes to the chain's end to be resynced, unless it is the
// chain's only serving replica, which keeps serving. It reports whether the
// chain changed.
func (c *Chain) Restart(target TargetID) bool {
	c.fill()
	i := slices.Index(c.Targets, target)
	if i < 0 {
		return false
	}
	c.Version++
	if c.States[i] == Serving && len(c.Serving()) == 1 {
		return true
	}
	c.Targets = append(slices.Delete(c.Targets, i, i+1), target)
	c.States = append(slices.Delete(c.States, i, i+1), Syncing)
	return true
}

// Synced lets a syncing target that caught up serve; it reports whether
// target was syncing in the chain.
func (c *Chain) Synced(target TargetID) bool {
	c.fill()
	i := slices.Index(c.Targets, target)
	if i < 0 || c.States[i] != Syncing {
		return false
	}
	c.States[i] = Serving
	c.Version++
	return true
}

// Position reports where target sits in chain c: its index, its successor
// (0 when it is the tail) and whether it is in the chain at all.
func (c Chain) Position(target TargetID) (int, TargetID, bool) {
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

// FileRouting is a Provider that reads the routing from a JSON file
// and watches it for changes: how separate storage processes share a
// routing until mgmtd serves it. WriteRoutingFile replaces the file
// atomically.
type FileRouting struct {
	path string
	poll time.Duration

	mu      sync.Mutex
	r       *Routing
	changed chan struct{}

	stop chan struct{}
	done chan struct{}
}

// NewFileRouting loads path and polls it every poll for a new version.
func NewFileRouting(path string, poll time.Duration) (*FileRouting, error) {
	r, err := readRoutingFile(path)
	if err != nil {
		return nil, err
	}
	f := &FileRouting{path: path, poll: poll, r: r, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go f.watch()
	return f, nil
}

func (f *FileRouting) Routing() *Routing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r
}

func (f *FileRouting) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// Close stops watching the file.
func (f *FileRouting) Close() {
	close(f.stop)
	<-f.done
}

func (f *FileRouting) watch() {
	defer close(f.done)
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		r, err := readRoutingFile(f.path)
		if err != nil {
			continue // a writer's rename is atomic; anything else is retried
		}
		f.mu.Lock()
		if r.Version != f.r.Version {
			f.r = r
			close(f.changed)
			f.changed = make(chan struct{})
		}
		f.mu.Unlock()
	}
}

func readRoutingFile(path string) (*Routing, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read routing: %w", err)
	}
	r := &Routing{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("read routing %s: %w", path, err)
	}
	return r, nil
}

// WriteRoutingFile replaces path with r, atomically.
func WriteRoutingFile(path string, r *Routing) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode routing: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write routing: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace routing %s: %w", path, err)
	}
	return nil
}
