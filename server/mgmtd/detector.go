package mgmtd

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/internal/tick"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Proposer is what the Detector needs of the metadata Raft group.
type Proposer interface {
	// IsLeader reports whether this replica leads the group.
	IsLeader() bool
	// ClusterMap returns the map as this replica has applied it.
	ClusterMap() (*mgmtdpb.ClusterMap, error)
	// ProposeCluster commits a change to the map through the log.
	ProposeCluster(ctx context.Context, cmd *mgmtdpb.Command) error
}

// Detector runs on the leader and keeps each target's heartbeat as a lease,
// in memory: a lease that lapses takes the target offline, a heartbeat from
// an offline target starts its resync. Only state changes go through the
// log, never the heartbeats themselves; a new leader starts everyone with a
// full lease.
type Detector struct {
	p     Proposer
	lease time.Duration
	log   *slog.Logger

	mu     sync.Mutex
	seen   map[uint32]time.Time
	space  map[uint32]*mgmtdpb.TargetSpace // as last reported
	leader bool

	lapsed prometheus.Counter
}

// FullBelow is the free space under which a target counts as full: it is
// marked so in the map, and writes to its chains fail fast, until it has
// twice as much again.
var FullBelow uint64 = 64 << 20

// Grant is how long after it sent a heartbeat a node may go on serving:
// less than the lease, so that a node that stops hearing back (paused,
// partitioned) stops serving before mgmtd gives its chains to others.
func (d *Detector) Grant() time.Duration { return d.lease * 2 / 3 }

// Metrics are the detector's Prometheus metrics: leases that lapsed
// (heartbeats missed long enough to take a target offline).
func (d *Detector) Metrics() []prometheus.Collector { return []prometheus.Collector{d.lapsed} }

// NewDetector makes a detector with the given lease.
func NewDetector(p Proposer, lease time.Duration, log *slog.Logger) *Detector {
	if log == nil {
		log = slog.Default()
	}
	return &Detector{p: p, lease: lease, log: log, seen: map[uint32]time.Time{}, space: map[uint32]*mgmtdpb.TargetSpace{},
		lapsed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_mgmtd_leases_lapsed_total", Help: "Target leases that lapsed (heartbeats missed), taking the target offline."})}
}

// Heartbeat records that a node's targets are alive, with their disks'
// space as the node reports it; an offline one is brought back, a target
// whose disk filled up (or has room again) is marked so. It returns the
// map's version after those changes: the node serves only once its routing
// has caught up with it.
func (d *Detector) Heartbeat(ctx context.Context, targets []uint32, space []*mgmtdpb.TargetSpace) (uint64, error) {
	now := time.Now()
	d.mu.Lock()
	for _, t := range targets {
		d.seen[t] = now
	}
	for _, sp := range space {
		if slices.Contains(targets, sp.Target) && sp.FreeBytes <= sp.TotalBytes {
			d.space[sp.Target] = sp
		}
	}
	d.mu.Unlock()
	if !d.p.IsLeader() {
		return 0, errNotLeader
	}
	m, err := d.p.ClusterMap()
	if err != nil {
		return 0, err
	}
	propose := func(cmd *mgmtdpb.Command) error {
		if err := d.p.ProposeCluster(ctx, cmd); err != nil {
			return err
		}
		if m, err = d.p.ClusterMap(); err != nil {
			return err
		}
		return nil
	}
	for _, id := range targets {
		t := target(m, id)
		if t == nil {
			continue
		}
		if t.State == mgmtdpb.TargetState_OFFLINE {
			if err := propose(&mgmtdpb.Command{Op: &mgmtdpb.Command_TargetRejoin{TargetRejoin: id}}); err != nil {
				return 0, err
			}
			d.log.Info("target back", "target", id)
		}
	}
	for _, sp := range space {
		t := target(m, sp.Target)
		if t == nil || !slices.Contains(targets, sp.Target) {
			continue
		}
		if full := sp.FreeBytes < FullBelow || t.Full && sp.FreeBytes < 2*FullBelow; full != t.Full {
			if err := propose(&mgmtdpb.Command{Op: &mgmtdpb.Command_TargetFull{TargetFull: &mgmtdpb.TargetFull{Target: sp.Target, Full: full}}}); err != nil {
				return 0, err
			}
			d.log.Warn("target disk full", "target", sp.Target, "full", full, "free", sp.FreeBytes)
		}
	}
	return m.Version, nil
}

var errNotLeader = errors.New("mgmtd: not the leader")

// Run checks leases every quarter lease until ctx ends.
func (d *Detector) Run(ctx context.Context) {
	tick.Every(ctx, d.lease/4, func() { d.check(ctx) })
}

func (d *Detector) check(ctx context.Context) {
	now := time.Now()
	leader := d.p.IsLeader()
	d.mu.Lock()
	if leader && !d.leader {
		// Newly in office: everyone gets a full lease from now.
		for id := range d.seen {
			d.seen[id] = now
		}
	}
	d.leader = leader
	d.mu.Unlock()
	if !leader {
		return
	}
	m, err := d.p.ClusterMap()
	if err != nil {
		return
	}
	for _, t := range m.Targets {
		if t.State == mgmtdpb.TargetState_OFFLINE {
			continue
		}
		d.mu.Lock()
		last, ok := d.seen[t.Id]
		if !ok {
			d.seen[t.Id], last = now, now // first sight: a full lease
		}
		d.mu.Unlock()
		if now.Sub(last) > d.lease {
			if err := d.p.ProposeCluster(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetOffline{TargetOffline: t.Id}}); err != nil {
				d.log.Warn("cannot take a target offline", "target", t.Id, "err", err)
				continue
			}
			d.lapsed.Inc()
			d.log.Warn("target lease lapsed; offline", "target", t.Id, "last heartbeat", last)
		}
	}
}
