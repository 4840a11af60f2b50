package mgmtd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/proto/mgmtdpb"
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

	// toGo caches ToGo for one version of the map: status asks often,
	// and playing the planner out over a large map takes a while.
	mu      sync.Mutex
	toGoVer uint64
	toGo    uint32
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
	if req.Placement == 0 { // a caller that does not choose gets the newest
		req.Placement = PlacementSpread
	}
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

// Drain marks the named targets, and every target of the named nodes,
// draining (or, with undrain, no longer draining). A name the map does not
// know is refused whole.
func (s *Service) Drain(ctx context.Context, req *mgmtdpb.DrainRequest) (*mgmtdpb.MoveProgress, error) {
	ids, err := s.resolveDrain(req, false)
	if err != nil {
		return nil, err
	}
	if _, err := s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetDraining{SetDraining: &mgmtdpb.SetDraining{Targets: ids, Draining: !req.Undrain}}}); err != nil {
		return nil, err
	}
	return s.Moves(ctx, &mgmtdpb.Empty{})
}

// Retire forgets drained targets, and nodes left with none; names the map
// does not know are taken as retired already.
func (s *Service) Retire(ctx context.Context, req *mgmtdpb.DrainRequest) (*mgmtdpb.MoveProgress, error) {
	ids, err := s.resolveDrain(req, true)
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		if _, err := s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_RetireTargets{RetireTargets: &mgmtdpb.RetireTargets{Targets: ids}}}); err != nil {
			return nil, err
		}
	}
	return s.Moves(ctx, &mgmtdpb.Empty{})
}

// resolveDrain is drainTargets on this replica's map, failing as gRPC
// errors.
func (s *Service) resolveDrain(req *mgmtdpb.DrainRequest, gone bool) ([]uint32, error) {
	m, err := s.g.ClusterMap()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	ids, err := drainTargets(m, req, gone)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return ids, nil
}

// drainTargets resolves a drain request's nodes and targets to target ids;
// gone, names the map does not know are skipped instead of refused.
func drainTargets(m *mgmtdpb.ClusterMap, req *mgmtdpb.DrainRequest, gone bool) ([]uint32, error) {
	if len(req.Nodes) == 0 && len(req.Targets) == 0 {
		return nil, errors.New("name a storage node or a target")
	}
	var ids []uint32
	for _, n := range req.Nodes {
		found := false
		for _, t := range m.Targets {
			if t.Node == n {
				ids, found = append(ids, t.Id), true
			}
		}
		if !found && !gone {
			return nil, fmt.Errorf("no storage node %q with targets", n)
		}
	}
	for _, id := range req.Targets {
		if target(m, id) == nil {
			if gone {
				continue
			}
			return nil, fmt.Errorf("no target %d", id)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Rebalance starts a rebalance, or stops one.
func (s *Service) Rebalance(ctx context.Context, req *mgmtdpb.RebalanceRequest) (*mgmtdpb.MoveProgress, error) {
	if _, err := s.propose(ctx, &mgmtdpb.Command{Op: &mgmtdpb.Command_SetRebalance{SetRebalance: &mgmtdpb.SetRebalance{On: !req.Stop}}}); err != nil {
		return nil, err
	}
	return s.Moves(ctx, &mgmtdpb.Empty{})
}

// Moves reports the replica moves as this replica's map has them.
func (s *Service) Moves(ctx context.Context, _ *mgmtdpb.Empty) (*mgmtdpb.MoveProgress, error) {
	m, err := s.g.ClusterMap()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.toGoVer != m.Version || m.Version == 0 {
		s.toGoVer, s.toGo = m.Version, uint32(ToGo(m))
	}
	p := Progress(m)
	p.ToGo = s.toGo
	return p, nil
}

// Progress is where the map's replica moves stand, but for ToGo (0).
func Progress(m *mgmtdpb.ClusterMap) *mgmtdpb.MoveProgress {
	p := &mgmtdpb.MoveProgress{Done: m.MovesDone, Cancelled: m.MovesCancelled, Rebalance: m.Rebalance}
	for _, c := range m.Chains {
		if c.Move != nil {
			p.InFlight = append(p.InFlight, c.Move)
		}
	}
	for _, t := range m.Targets {
		if t.Draining {
			p.Draining = append(p.Draining, t.Id)
			if len(t.Chains) == 0 {
				p.Drained = append(p.Drained, t.Id)
			}
		}
	}
	return p
}
