package storage

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
		n.Chains[id] = c
	}
	for id, t := range r.Targets {
		n.Targets[id] = t
	}
	return n
}

// SetOffline takes target out of every chain it is in, bumping those
// chains' versions: what mgmtd does when a target's lease lapses.
func (r *Routing) SetOffline(target TargetID) {
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
}

// Rejoin puts a returning target at the end of chain, syncing.
func (r *Routing) Rejoin(chain ChainID, target TargetID) {
	t := r.Targets[target]
	t.State = Syncing
	r.Targets[target] = t
	c := r.Chains[chain]
	c.Targets = append(c.Targets, target)
	c.Version++
	r.Chains[chain] = c
}

// SetServing lets a target that finished syncing serve.
func (r *Routing) SetServing(chain ChainID, target TargetID) {
	t := r.Targets[target]
	t.State = Serving
	r.Targets[target] = t
	c := r.Chains[chain]
	c.Version++
	r.Chains[chain] = c
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

// FileRouting is a RoutingProvider that reads the routing from a JSON file
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
