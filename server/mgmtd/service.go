package mgmtd

import (
	"context"
	"errors"

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
