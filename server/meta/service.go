package meta

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Service serves the namespace over gRPC (metapb.MetaServer) from a
// replica: mutations through the Raft log, reads linearizable on the leader.
// Paths are resolved on the leader just before the command is proposed; a
// concurrent rename of a parent makes the command fail cleanly (not found),
// never apply to the wrong place.
type Service struct {
	metapb.UnimplementedMetaServer
	r *Replica
}

// NewService serves r.
func NewService(r *Replica) *Service { return &Service{r: r} }

// split cleans an absolute path into its parent's path and its last name.
func split(p string) (string, string, error) {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // REST paths arrive without the leading slash
	}
	if len(p) > maxPath {
		return "", "", ErrNameTooLong
	}
	clean := path.Clean(p)
	if clean == "/" {
		return "", "", ErrInvalidName
	}
	dir, name := path.Split(clean)
	return dir, name, nil
}

func (s *Service) resolveParent(ctx context.Context, p string) (uint64, string, error) {
	dir, name, err := split(p)
	if err != nil {
		return 0, "", err
	}
	var parent uint64
	err = s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.Resolve(dir)
		if err == nil {
			parent = in.Ino
		}
		return err
	})
	return parent, name, err
}

func (s *Service) do(ctx context.Context, cmd *metapb.Command) (*metapb.Inode, error) {
	res, err := s.r.Do(ctx, cmd)
	if err != nil {
		return nil, toStatus(err)
	}
	if res.Code != 0 {
		return nil, toStatus(fabric.RemoteError(fabric.Code(res.Code), res.Error))
	}
	return res.Inode, nil
}

func (s *Service) Stat(ctx context.Context, req *metapb.PathRequest) (*metapb.Inode, error) {
	p := req.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	var out *metapb.Inode
	err := s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.Resolve(path.Clean(p))
		out = in
		return err
	})
	return out, toStatus(err)
}

func (s *Service) BatchStat(ctx context.Context, req *metapb.BatchStatRequest) (*metapb.BatchStatReply, error) {
	if len(req.Paths) > 10000 {
		return nil, status.Error(codes.InvalidArgument, "at most 10000 paths per batch")
	}
	reply := &metapb.BatchStatReply{Inodes: make([]*metapb.Inode, len(req.Paths))}
	err := s.r.Read(ctx, func(ns *Namespace) error {
		for i, p := range req.Paths {
			if !strings.HasPrefix(p, "/") {
				p = "/" + p
			}
			in, err := ns.Resolve(path.Clean(p))
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotDir) {
				in, err = &metapb.Inode{}, nil
			}
			if err != nil {
				return err
			}
			reply.Inodes[i] = in
		}
		return nil
	})
	return reply, toStatus(err)
}

func (s *Service) List(ctx context.Context, req *metapb.ListRequest) (*metapb.ListReply, error) {
	p := req.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	reply := &metapb.ListReply{}
	err := s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.Resolve(path.Clean(p))
		if err != nil {
			return err
		}
		reply.Entries, reply.More, err = ns.List(in.Ino, req.After, limit)
		return err
	})
	return reply, toStatus(err)
}

func (s *Service) make(ctx context.Context, req *metapb.MakeRequest, dir bool) (*metapb.Inode, error) {
	parent, name, err := s.resolveParent(ctx, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	cmd := &metapb.Command{Client: req.Client, Seq: req.Seq}
	if dir {
		cmd.Op = &metapb.Command_Mkdir{Mkdir: &metapb.MkdirOp{Parent: parent, Name: name, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid}}
	} else {
		cmd.Op = &metapb.Command_Create{Create: &metapb.CreateOp{Parent: parent, Name: name, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid}}
	}
	return s.do(ctx, cmd)
}

func (s *Service) Mkdir(ctx context.Context, req *metapb.MakeRequest) (*metapb.Inode, error) {
	return s.make(ctx, req, true)
}

func (s *Service) Create(ctx context.Context, req *metapb.MakeRequest) (*metapb.Inode, error) {
	return s.make(ctx, req, false)
}

func (s *Service) Symlink(ctx context.Context, req *metapb.SymlinkRequest) (*metapb.Inode, error) {
	parent, name, err := s.resolveParent(ctx, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Symlink{Symlink: &metapb.SymlinkOp{Parent: parent, Name: name, Target: req.Target}}})
}

func (s *Service) remove(ctx context.Context, req *metapb.PathRequest, dir bool) (*metapb.Empty, error) {
	parent, name, err := s.resolveParent(ctx, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	op := &metapb.RemoveOp{Parent: parent, Name: name}
	cmd := &metapb.Command{Client: req.Client, Seq: req.Seq, Op: &metapb.Command_Unlink{Unlink: op}}
	if dir {
		cmd.Op = &metapb.Command_Rmdir{Rmdir: op}
	}
	_, err = s.do(ctx, cmd)
	return &metapb.Empty{}, err
}

func (s *Service) Unlink(ctx context.Context, req *metapb.PathRequest) (*metapb.Empty, error) {
	return s.remove(ctx, req, false)
}

func (s *Service) Rmdir(ctx context.Context, req *metapb.PathRequest) (*metapb.Empty, error) {
	return s.remove(ctx, req, true)
}

func (s *Service) Rename(ctx context.Context, req *metapb.RenameRequest) (*metapb.Empty, error) {
	sp, sn, err := s.resolveParent(ctx, req.From)
	if err != nil {
		return nil, toStatus(err)
	}
	dp, dn, err := s.resolveParent(ctx, req.To)
	if err != nil {
		return nil, toStatus(err)
	}
	_, err = s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Rename{Rename: &metapb.RenameOp{SrcParent: sp, SrcName: sn, DstParent: dp, DstName: dn}}})
	return &metapb.Empty{}, err
}

func (s *Service) Status(ctx context.Context, req *metapb.StatusRequest) (*metapb.StatusReply, error) {
	addr, id := s.r.raft.LeaderWithID()
	reply := &metapb.StatusReply{Leader: string(id) + "@" + string(addr), State: s.r.raft.State().String(), AppliedIndex: s.r.AppliedIndex()}
	reply.Members, _ = s.r.Members()
	n, err := s.r.Namespace().Statfs()
	reply.Inodes = n
	return reply, toStatus(err)
}

// Open looks the file up (with its chain table, so the client can place
// chunks) and, for writing, opens a write session named by the request's
// sequence number.
func (s *Service) Open(ctx context.Context, req *metapb.OpenRequest) (*metapb.OpenReply, error) {
	reply := &metapb.OpenReply{}
	p := req.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	err := s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.Resolve(path.Clean(p))
		reply.Inode = in
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if reply.Inode.Type != metapb.InodeType_FILE {
		return nil, toStatus(fmt.Errorf("open %s: %w", req.Path, ErrIsDir))
	}
	m, err := s.r.ClusterMap()
	if err != nil {
		return nil, toStatus(err)
	}
	for _, t := range m.Tables {
		if t.Id == reply.Inode.Layout.GetChainTable() {
			reply.Chains = t.Chains
		}
	}
	if req.Write {
		reply.Session = req.Seq
		if _, err := s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
			Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: reply.Inode.Ino, Session: req.Seq, Client: req.Client}}}); err != nil {
			return nil, err
		}
	}
	return reply, nil
}

// Close ends a write session, setting the file's length if given.
func (s *Service) Close(ctx context.Context, req *metapb.CloseRequest) (*metapb.Empty, error) {
	_, err := s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_CloseSession{CloseSession: &metapb.SessionOp{Ino: req.Ino, Client: req.Client, Session: req.Session, Size: req.Size}}})
	return &metapb.Empty{}, err
}

func (s *Service) AddMember(ctx context.Context, req *metapb.MemberRequest) (*metapb.Empty, error) {
	if req.Id == "" || req.Address == "" {
		return nil, status.Error(codes.InvalidArgument, "a member needs an id and a Raft address")
	}
	return &metapb.Empty{}, toStatus(s.r.AddMember(req.Id, req.Address))
}

func (s *Service) RemoveMember(ctx context.Context, req *metapb.MemberRequest) (*metapb.Empty, error) {
	if req.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "which member?")
	}
	return &metapb.Empty{}, toStatus(s.r.RemoveMember(req.Id))
}

// toStatus maps namespace errors to gRPC status codes (and so, through the
// gateway, to HTTP status codes).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrStale):
		code = codes.NotFound
	case errors.Is(err, ErrExist):
		code = codes.AlreadyExists
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrNameTooLong), errors.Is(err, fabric.ErrBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, ErrNotDir), errors.Is(err, ErrIsDir), errors.Is(err, ErrNotEmpty), errors.Is(err, ErrLoop):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrNotLeader):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}
