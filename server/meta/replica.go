package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/internal/pebbledb"
	"github.com/sluicefs/sluice/server/raftstore"
)

// ReplicaConfig configures one replica of the metadata Raft group.
type ReplicaConfig struct {
	// ID names the replica in the group.
	ID string
	// Dir holds the Raft log, snapshots and the state machine.
	Dir string
	// Bind is the Raft transport's TCP address ("127.0.0.1:0" picks a port).
	Bind string
	// RootLayout is the layout the root directory hands down.
	RootLayout *metapb.Layout
	// Fast shortens Raft's timeouts, for tests on one machine.
	Fast bool
	// SnapshotEvery is how many log entries the replica applies between
	// snapshots of the namespace (default 8192, Raft's); it keeps a
	// quarter more behind the last one for followers that lag, and looks
	// every SnapshotEvery × 3.75 ms (30 s at the default). A snapshot
	// writes the whole namespace, so it must come rarely next to the
	// writes that fill the log; but a restart applies again every entry
	// since the last (200,000 in 2.7 s here), so not too rarely: Raft's
	// own two minutes could leave a minute of replay after a busy spell.
	// Tests set it low to exercise snapshots.
	SnapshotEvery uint64
	// Logger receives Raft's warnings and errors and Pebble's errors
	// (default slog.Default()); their informational chatter is dropped.
	Logger *slog.Logger
}

// namespaceCache is the namespace store's block cache. Every command and
// lookup reads it (a create looks its name up first), one at a time on
// the apply path: with Pebble's default 8 MiB, a namespace of 300,000
// files spent a third of the replica's CPU reading blocks again
// (BenchmarkMetaSnapshots: 1.2x the creates a second with this).
const namespaceCache = 64 << 20

// Replica is one member of the metadata Raft group: the Raft node, its
// Pebble log and the namespace state machine.
type Replica struct {
	cfg   ReplicaConfig
	raft  *raft.Raft
	fsm   *FSM
	store *raftstore.Store
	fsmDB *pebble.DB
	trans *raft.NetworkTransport

	barrierTerm atomic.Uint64 // the term a barrier was passed in
	readers     readLeases    // files clients hold open for reading (leader)
	locks       lockTable     // file locks, the leader's (locks.go)

	applyObserver interface{ Observe(float64) } // set by NewMetrics
}

// StartReplica opens (or creates) a replica in cfg.Dir. A new group is
// started with Bootstrap on one replica.
func StartReplica(cfg ReplicaConfig) (*Replica, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replica{cfg: cfg}
	var err error
	rlog := raftLogger(cfg.Logger.With("replica", cfg.ID))
	fail := func(err error) (*Replica, error) {
		r.Close()
		return nil, err
	}
	if r.store, err = raftstore.Open(filepath.Join(cfg.Dir, "raft"), cfg.Logger); err != nil {
		return fail(err)
	}
	if r.fsmDB, err = pebbledb.Open(filepath.Join(cfg.Dir, "state"), cfg.Logger, namespaceCache); err != nil {
		return fail(fmt.Errorf("open namespace state: %w", err))
	}
	if r.fsm, err = NewFSM(r.fsmDB, cfg.RootLayout); err != nil {
		return fail(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 3, rlog.Named("snapshots"))
	if err != nil {
		return fail(err)
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.Bind)
	if err != nil {
		return fail(err)
	}
	if r.trans, err = raft.NewTCPTransportWithLogger(cfg.Bind, nil, 3, 5*time.Second, rlog.Named("transport")); err != nil {
		return fail(fmt.Errorf("raft transport on %s: %w", addr, err))
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = rlog
	if cfg.Fast {
		rc.HeartbeatTimeout, rc.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
		rc.LeaderLeaseTimeout, rc.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
	}
	n := cfg.SnapshotEvery
	if n == 0 {
		n = 8192
	}
	rc.SnapshotThreshold, rc.TrailingLogs = n, n+n/4
	rc.SnapshotInterval = time.Duration(n) * 3750 * time.Microsecond
	if r.raft, err = raft.NewRaft(rc, r.fsm, r.store, r.store, snaps, r.trans); err != nil {
		return fail(err)
	}
	return r, nil
}

// Addr is the replica's Raft address.
func (r *Replica) Addr() string { return string(r.trans.LocalAddr()) }

// Bootstrap starts a new group of the given replicas (ID -> address).
func (r *Replica) Bootstrap(members map[string]string) error {
	var c raft.Configuration
	for id, addr := range members {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	return r.raft.BootstrapCluster(c).Error()
}

// IsLeader reports whether this replica leads the group now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader is the leader's ID as this replica knows it; "" when it knows none.
func (r *Replica) Leader() string {
	_, id := r.raft.LeaderWithID()
	return string(id)
}

func (r *Replica) notLeader() error {
	addr, id := r.raft.LeaderWithID()
	return fmt.Errorf("%w (leader %s at %s)", fsmeta.ErrNotLeader, id, addr)
}

// Do applies a mutation through the Raft log and returns its result. Only
// the leader takes mutations; it stamps the time.
func (r *Replica) Do(ctx context.Context, cmd *metapb.Command) (*metapb.Result, error) {
	if !r.IsLeader() {
		return nil, r.notLeader()
	}
	if cmd.NowNs == 0 {
		cmd.NowNs = time.Now().UnixNano()
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, context.DeadlineExceeded // raft would take 0 as no limit
		}
	}
	t0 := time.Now()
	f := r.raft.Apply(data, timeout)
	err = f.Error()
	if r.applyObserver != nil {
		r.applyObserver.Observe(time.Since(t0).Seconds())
	}
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, r.notLeader()
		}
		return nil, fmt.Errorf("apply: %w", err)
	}
	res, ok := f.Response().(*metapb.Result)
	if !ok {
		return nil, fmt.Errorf("apply: unexpected response %T", f.Response())
	}
	return res, nil
}

// Read runs fn on the namespace with linearizable semantics: only the
// leader serves, after confirming it still leads (VerifyLeader) and, once
// per term, after a barrier that applies everything committed before it
// took office.
func (r *Replica) Read(ctx context.Context, fn func(*Namespace) error) error {
	if !r.IsLeader() {
		return r.notLeader()
	}
	term := r.raft.CurrentTerm()
	if r.barrierTerm.Load() != term {
		if err := r.raft.Barrier(5 * time.Second).Error(); err != nil {
			return r.notLeader()
		}
		r.barrierTerm.Store(term)
	}
	if err := r.raft.VerifyLeader().Error(); err != nil {
		return r.notLeader()
	}
	return fn(r.fsm.ns)
}

// ClusterMap returns the cluster map as this replica has applied it.
func (r *Replica) ClusterMap() (*mgmtdpb.ClusterMap, error) { return r.fsm.cluster.Map() }

// ClusterChanged returns a channel closed at the cluster map's next change
// on this replica.
func (r *Replica) ClusterChanged() <-chan struct{} { return r.fsm.cluster.Changed() }

// ProposeCluster commits a change to the cluster map (mgmtd's commands go
// through the same log as the namespace's).
func (r *Replica) ProposeCluster(ctx context.Context, cmd *mgmtdpb.Command) error {
	res, err := r.Do(ctx, &metapb.Command{Op: &metapb.Command_Cluster{Cluster: cmd}})
	if err != nil {
		return err
	}
	if res.Code != 0 {
		return fabric.RemoteError(fabric.Code(res.Code), res.Error)
	}
	return nil
}

// AddMember adds a voting replica to the group; it catches up from the
// leader's snapshot and log. Only the leader can change the membership.
func (r *Replica) AddMember(id, addr string) error {
	if !r.IsLeader() {
		return r.notLeader()
	}
	if err := r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("add member %s: %w", id, err)
	}
	return nil
}

// RemoveMember removes a replica from the group.
func (r *Replica) RemoveMember(id string) error {
	if !r.IsLeader() {
		return r.notLeader()
	}
	if err := r.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("remove member %s: %w", id, err)
	}
	return nil
}

// Members lists the group's replicas as id@address.
func (r *Replica) Members() ([]string, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		out = append(out, string(s.ID)+"@"+string(s.Address))
	}
	return out, nil
}

// AppliedIndex is the last log index whose command the namespace has applied.
func (r *Replica) AppliedIndex() uint64 { return r.fsm.Applied() }

// Namespace exposes the state for checks (not linearizable).
func (r *Replica) Namespace() *Namespace { return r.fsm.ns }

// Close stops the replica.
func (r *Replica) Close() error {
	if r.raft != nil {
		r.raft.Shutdown().Error()
	}
	if r.trans != nil {
		r.trans.Close()
	}
	if r.store != nil {
		r.store.Close()
	}
	if r.fsmDB != nil {
		r.fsmDB.Close()
	}
	return nil
}
