package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Fault kinds.
const (
	KillShort  = "kill-short"  // SIGKILL a storage node, restart within the lease (0.5-2 s)
	KillLong   = "kill-long"   // SIGKILL a storage node, restart after the lease (4-8 s)
	KillChain  = "kill-chain"  // SIGKILL three nodes (every replica of a chain) a little apart, restart them all (2-6 s)
	Pause      = "pause"       // SIGSTOP a storage node past the lease (4-7 s), then SIGCONT
	MetaLeader = "meta-leader" // SIGKILL the meta leader, restart it (1-5 s)
	Partition  = "partition"   // drop TCP to and from a node's fabric port (3-8 s)
	DiskFull   = "disk-full"   // fill a tmpfs target's disk below the full mark (5-10 s)
)

// AllFaults is every kind, the "mixed" scenario.
var AllFaults = []string{KillShort, KillLong, KillChain, Pause, MetaLeader, Partition, DiskFull}

// ErrBusy: the fault cannot run now (the processes it needs are under
// other faults); the scheduler draws again later.
var ErrBusy = errors.New("nemesis: busy")

// Fault is one injected fault, healed once.
type Fault interface {
	Kind() string
	String() string
	// HealAt is when the scheduler heals it, unless the run ends first.
	HealAt() time.Time
	Heal(ctx context.Context) error
}

// Nemesis injects one kind of fault.
type Nemesis interface {
	Kind() string
	Inject(ctx context.Context, rng *rand.Rand) (Fault, error)
}

// Impairments tracks which processes are under a fault, so that faults
// on one process do not overlap and the scheduler bounds how many
// storage nodes are down at once.
type Impairments struct {
	nodes map[uint32]string // target -> fault kind
	meta  bool
	// MaxNodes bounds the storage nodes under faults at once.
	MaxNodes int
}

func (im *Impairments) freeNodes(all []uint32) []uint32 {
	var out []uint32
	for _, id := range all {
		if _, busy := im.nodes[id]; !busy {
			out = append(out, id)
		}
	}
	return out
}

// pickNodes draws n free storage nodes, or ErrBusy.
func (im *Impairments) pickNodes(rng *rand.Rand, all []uint32, n int, kind string) ([]uint32, error) {
	free := im.freeNodes(all)
	if len(free) < n || len(im.nodes)+n > im.MaxNodes {
		return nil, ErrBusy
	}
	rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, id := range free[:n] {
		im.nodes[id] = kind
	}
	return free[:n], nil
}

func (im *Impairments) release(ids ...uint32) {
	for _, id := range ids {
		delete(im.nodes, id)
	}
}

// faultBase holds what every fault has.
type faultBase struct {
	kind, desc string
	healAt     time.Time
	heal       func(ctx context.Context) error
}

func (f *faultBase) Kind() string                   { return f.kind }
func (f *faultBase) String() string                 { return f.desc }
func (f *faultBase) HealAt() time.Time              { return f.healAt }
func (f *faultBase) Heal(ctx context.Context) error { return f.heal(ctx) }

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Env is what the nemeses act on.
type Env struct {
	Cluster  *Cluster
	Firewall *Firewall // nil: no partitions
	Tmpfs    []uint32  // targets whose disk can be filled
	Imp      *Impairments
}

func (e *Env) targets() []uint32 {
	var ids []uint32
	for _, p := range e.Cluster.Nodes {
		ids = append(ids, p.Target)
	}
	return ids
}

type killNemesis struct {
	env    *Env
	kind   string
	n      int
	lo, hi time.Duration
}

func (k *killNemesis) Kind() string { return k.kind }

func (k *killNemesis) Inject(ctx context.Context, rng *rand.Rand) (Fault, error) {
	ids, err := k.env.Imp.pickNodes(rng, k.env.targets(), k.n, k.kind)
	if err != nil {
		return nil, err
	}
	var names []string
	for i, id := range ids {
		if i > 0 { // overlapping, not simultaneous: the chain reconfigures in between
			time.Sleep(between(rng, 100*time.Millisecond, 700*time.Millisecond))
		}
		p := k.env.Cluster.Node(id)
		if err := p.Kill(); err != nil {
			k.env.Imp.release(ids...)
			return nil, err
		}
		names = append(names, p.Name)
	}
	d := between(rng, k.lo, k.hi)
	return &faultBase{kind: k.kind, desc: fmt.Sprintf("SIGKILL %s, restart in %v", strings.Join(names, ","), d.Round(time.Millisecond)),
		healAt: time.Now().Add(d), heal: func(ctx context.Context) error {
			defer k.env.Imp.release(ids...)
			var errs []error
			for _, id := range ids {
				errs = append(errs, k.env.Cluster.Node(id).Start())
			}
			return errors.Join(errs...)
		}}, nil
}

type pauseNemesis struct{ env *Env }

func (pn *pauseNemesis) Kind() string { return Pause }

func (pn *pauseNemesis) Inject(ctx context.Context, rng *rand.Rand) (Fault, error) {
	ids, err := pn.env.Imp.pickNodes(rng, pn.env.targets(), 1, Pause)
	if err != nil {
		return nil, err
	}
	p := pn.env.Cluster.Node(ids[0])
	if err := p.Pause(); err != nil {
		pn.env.Imp.release(ids...)
		return nil, err
	}
	d := between(rng, 4*time.Second, 7*time.Second)
	return &faultBase{kind: Pause, desc: fmt.Sprintf("SIGSTOP %s for %v", p.Name, d.Round(time.Millisecond)), healAt: time.Now().Add(d),
		heal: func(ctx context.Context) error {
			defer pn.env.Imp.release(ids...)
			return p.Resume()
		}}, nil
}

type metaNemesis struct{ env *Env }

func (m *metaNemesis) Kind() string { return MetaLeader }

func (m *metaNemesis) Inject(ctx context.Context, rng *rand.Rand) (Fault, error) {
	if m.env.Imp.meta {
		return nil, ErrBusy
	}
	p, err := m.env.Cluster.Leader(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBusy, err)
	}
	m.env.Imp.meta = true
	if err := p.Kill(); err != nil {
		m.env.Imp.meta = false
		return nil, err
	}
	d := between(rng, time.Second, 5*time.Second)
	return &faultBase{kind: MetaLeader, desc: fmt.Sprintf("SIGKILL meta leader %s, restart in %v", p.Name, d.Round(time.Millisecond)), healAt: time.Now().Add(d),
		heal: func(ctx context.Context) error {
			defer func() { m.env.Imp.meta = false }()
			return p.Start()
		}}, nil
}

type partitionNemesis struct{ env *Env }

func (pn *partitionNemesis) Kind() string { return Partition }

func (pn *partitionNemesis) Inject(ctx context.Context, rng *rand.Rand) (Fault, error) {
	ids, err := pn.env.Imp.pickNodes(rng, pn.env.targets(), 1, Partition)
	if err != nil {
		return nil, err
	}
	p := pn.env.Cluster.Node(ids[0])
	port, err := portOf(p.Addr)
	if err == nil {
		err = pn.env.Firewall.Block(port)
	}
	if err != nil {
		pn.env.Imp.release(ids...)
		return nil, err
	}
	d := between(rng, 3*time.Second, 8*time.Second)
	return &faultBase{kind: Partition, desc: fmt.Sprintf("partition %s (fabric port %d) for %v", p.Name, port, d.Round(time.Millisecond)), healAt: time.Now().Add(d),
		heal: func(ctx context.Context) error {
			defer pn.env.Imp.release(ids...)
			return pn.env.Firewall.Unblock(port)
		}}, nil
}

type diskNemesis struct{ env *Env }

func (dn *diskNemesis) Kind() string { return DiskFull }

func (dn *diskNemesis) Inject(ctx context.Context, rng *rand.Rand) (Fault, error) {
	ids, err := dn.env.Imp.pickNodes(rng, dn.env.Tmpfs, 1, DiskFull)
	if err != nil {
		return nil, err
	}
	dir := TargetDir(dn.env.Cluster.Node(ids[0]).Dir, ids[0])
	// Well below mgmtd's full mark (64 MiB), with room left for the
	// target's metadata store.
	if err := FillDisk(dir, 24<<20); err != nil {
		dn.env.Imp.release(ids...)
		return nil, err
	}
	d := between(rng, 5*time.Second, 10*time.Second)
	return &faultBase{kind: DiskFull, desc: fmt.Sprintf("fill target %d's disk for %v", ids[0], d.Round(time.Millisecond)), healAt: time.Now().Add(d),
		heal: func(ctx context.Context) error {
			defer dn.env.Imp.release(ids...)
			return EmptyDisk(dir)
		}}, nil
}

// NewNemesis is the nemesis of kind on env.
func NewNemesis(kind string, env *Env) (Nemesis, error) {
	switch kind {
	case KillShort:
		return &killNemesis{env: env, kind: kind, n: 1, lo: 500 * time.Millisecond, hi: 2 * time.Second}, nil
	case KillLong:
		return &killNemesis{env: env, kind: kind, n: 1, lo: 4 * time.Second, hi: 8 * time.Second}, nil
	case KillChain:
		return &killNemesis{env: env, kind: kind, n: 3, lo: 2 * time.Second, hi: 6 * time.Second}, nil
	case Pause:
		return &pauseNemesis{env}, nil
	case MetaLeader:
		return &metaNemesis{env}, nil
	case Partition:
		if env.Firewall == nil {
			return nil, errors.New("no firewall")
		}
		return &partitionNemesis{env}, nil
	case DiskFull:
		if len(env.Tmpfs) == 0 {
			return nil, errors.New("no tmpfs target")
		}
		return &diskNemesis{env}, nil
	}
	return nil, fmt.Errorf("no fault kind %q (kinds: %v)", kind, AllFaults)
}

// cards is how many times each kind is in the deck the scheduler draws
// from: every kind comes up once a round (kill-short twice), in an order
// drawn by seed, so that even a short run sees every kind.
var cards = map[string]int{KillShort: 2, KillLong: 1, KillChain: 1, Pause: 1, MetaLeader: 1, Partition: 1, DiskFull: 1}

// Schedule runs nemeses for d: every 0.5-2.5 s it draws the next kind
// from a deck shuffled by rng (a kind that cannot run now goes back to
// the deck's end) and injects it, and heals each fault when its time comes;
// when d is over (or ctx ends) it heals every fault still active. Every
// injection, heal and error goes to event (the history). It returns the
// count of faults injected by kind.
func Schedule(ctx context.Context, rng *rand.Rand, nemeses []Nemesis, d time.Duration, event func(kind, fault, format string, args ...any)) map[string]int {
	counts := map[string]int{}
	var active []Fault
	heal := func(f Fault) {
		hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.Heal(hctx); err != nil {
			event("heal-error", f.Kind(), "%s: %v", f, err)
			return
		}
		event("heal", f.Kind(), "%s", f)
	}
	var deck []Nemesis
	deal := func() {
		for _, n := range nemeses {
			for range max(1, cards[n.Kind()]) {
				deck = append(deck, n)
			}
		}
		rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
	}
	end := time.Now().Add(d)
	if len(nemeses) == 0 { // no faults: the workload alone, for as long
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return counts
	}
	next := time.Now().Add(between(rng, 500*time.Millisecond, 2500*time.Millisecond))
	for time.Now().Before(end) && ctx.Err() == nil {
		wake := next
		for _, f := range active {
			if f.HealAt().Before(wake) {
				wake = f.HealAt()
			}
		}
		if wake.After(end) {
			wake = end
		}
		select {
		case <-time.After(time.Until(wake)):
		case <-ctx.Done():
		}
		now := time.Now()
		sort.SliceStable(active, func(i, j int) bool { return active[i].HealAt().Before(active[j].HealAt()) })
		for len(active) > 0 && !active[0].HealAt().After(now) {
			heal(active[0])
			active = active[1:]
		}
		if now.Before(next) || !now.Before(end) {
			continue
		}
		next = now.Add(between(rng, 500*time.Millisecond, 2500*time.Millisecond))
		if len(deck) == 0 {
			deal()
		}
		n := deck[0]
		deck = deck[1:]
		f, err := n.Inject(ctx, rng)
		switch {
		case errors.Is(err, ErrBusy):
			deck = append(deck, n)
			continue
		case err != nil:
			event("inject-error", n.Kind(), "%v", err)
			continue
		}
		counts[n.Kind()]++
		event("inject", n.Kind(), "%s", f)
		active = append(active, f)
	}
	for _, f := range slices.Backward(active) {
		heal(f)
	}
	return counts
}
