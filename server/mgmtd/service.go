package mgmtd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/server/storage"
)

// Group is what the service needs of the metadata Raft group.
type Group interface {
	Proposer
	// ClusterChanged returns a channel closed at the map's next change.
	ClusterChanged() <-chan struct{}
}

// Service serves mgmtd over gRPC (mgmtdpb.MgmtdServer).
type Service struct {
	mgmtdpb.UnimplementedMgmtdServer
	g Group
	d *Detector
}

// NewService serves g, feeding heartbeats to d.
func NewService(g Group, d *Detector) *Service { return &Service{g: g, d: d} }

func (s *Service) propose(ctx context.Context, cmd *mgmtdpb.Command) (*mgmtdpb.Empty, error) {
	if !s.g.IsLeader() {
		return nil, status.Error(codes.Unavailable, "mgmtd: not the leader")
	}
	if err := s.g.ProposeCluster(ctx, cmd); err != nil {
		if errors.Is(err, ErrBadCommand) {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &mgmtdpb.Empty{}, nil
}

func (s *Service) Register(ctx context.Context, req *mgmtdpb.RegisterNode) (*mgmtdpb.Empty, error) {
	return s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_RegisterNode{RegisterNode: req}})
}

func (s *Service) CreateTable(ctx context.Context, req *mgmtdpb.CreateChainTable) (*mgmtdpb.Empty, error) {
	return s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_CreateTable{CreateTable: req}})
}

func (s *Service) ReportSynced(ctx context.Context, req *mgmtdpb.TargetSynced) (*mgmtdpb.Empty, error) {
	return s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_TargetSynced{TargetSynced: req}})
}

// Heartbeat renews a node's lease (HeartbeatReply).
func (s *Service) Heartbeat(ctx context.Context, req *mgmtdpb.HeartbeatRequest) (*mgmtdpb.HeartbeatReply, error) {
	if !s.g.IsLeader() {
		return nil, status.Error(codes.Unavailable, "mgmtd: not the leader")
	}
	ver, err := s.d.Heartbeat(ctx, req.Targets, req.Space)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &mgmtdpb.HeartbeatReply{MapVersion: ver, LeaseMs: uint64(s.d.Grant().Milliseconds())}, nil
}

func (s *Service) GetClusterMap(ctx context.Context, _ *mgmtdpb.Empty) (*mgmtdpb.ClusterMap, error) {
	m, err := s.g.ClusterMap()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return m, nil
}

// WatchClusterMap streams the map now and at every change, until the
// caller goes away.
func (s *Service) WatchClusterMap(_ *mgmtdpb.Empty, stream grpc.ServerStreamingServer[mgmtdpb.ClusterMap]) error {
	for {
		changed := s.g.ClusterChanged()
		m, err := s.g.ClusterMap()
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := stream.Send(m); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// WatchedRouting is a storage.RoutingProvider fed by mgmtd's watch stream:
// storage nodes and clients route by it. It reconnects when the stream
// breaks, and only ever moves to a newer map.
type WatchedRouting struct {
	client mgmtdpb.MgmtdClient
	log    *slog.Logger

	mu      sync.Mutex
	r       *storage.Routing
	changed chan struct{}
	err     error // a refusal that retrying cannot cure (wrong token)

	cancel context.CancelFunc
	done   chan struct{}
}

// WatchRouting starts watching; it returns once the first map arrived (or
// ctx ended). ctx's values (the token metadata) go with every call.
func WatchRouting(ctx context.Context, client mgmtdpb.MgmtdClient, log *slog.Logger) (*WatchedRouting, error) {
	if log == nil {
		log = slog.Default()
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &WatchedRouting{client: client, log: log, changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go w.run(wctx)
	for {
		// The channel is taken before the look, or a map arriving between
		// the two would be a wake-up missed, and the wait endless.
		changed := w.Changed()
		if w.Routing() != nil {
			return w, nil
		}
		if err := w.failure(); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch cluster map: %w", err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			w.Close()
			return nil, fmt.Errorf("watch cluster map: %w", ctx.Err())
		}
	}
}

// firstMapWait bounds how long a new watch stream may go without its first
// map before it is replaced.
var firstMapWait = 5 * time.Second

func (w *WatchedRouting) run(ctx context.Context) {
	defer close(w.done)
	for ctx.Err() == nil {
		// The server sends the current map as soon as a stream opens; a
		// stream that brings nothing within firstMapWait is taken for
		// broken, abandoned and opened again.
		sctx, scancel := context.WithCancel(ctx)
		var first atomic.Bool
		timer := time.AfterFunc(firstMapWait, func() {
			if !first.Load() {
				w.log.Warn("no cluster map on the watch stream; opening another", "waited", firstMapWait)
				scancel()
			}
		})
		stream, err := w.client.WatchClusterMap(sctx, &mgmtdpb.Empty{})
		for err == nil {
			var m *mgmtdpb.ClusterMap
			if m, err = stream.Recv(); err == nil {
				first.Store(true)
				w.set(Routing(m))
			}
		}
		timer.Stop()
		scancel()
		if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
			w.mu.Lock()
			w.err = err
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			return
		}
		if ctx.Err() == nil {
			w.log.Debug("cluster map watch broke; reconnecting", "err", err)
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
}

func (w *WatchedRouting) set(r *storage.Routing) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.r != nil && r.Version <= w.r.Version {
		return
	}
	w.r = r
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *WatchedRouting) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Routing returns the newest routing seen (nil before the first).
func (w *WatchedRouting) Routing() *storage.Routing {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r
}

// Changed returns a channel closed at the next newer routing.
func (w *WatchedRouting) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Close stops watching.
func (w *WatchedRouting) Close() {
	w.cancel()
	<-w.done
}
