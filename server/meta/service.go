package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicefs/sluice/fsmeta"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

// Service serves the namespace over gRPC (metapb.MetaServer) from a
// replica: mutations through the Raft log, reads linearizable on the leader.
// Paths are resolved on the leader just before the command is proposed; a
// concurrent rename of a parent makes the command fail cleanly (not found),
// never apply to the wrong place.
type Service struct {
	metapb.UnimplementedMetaServer
	r     *Replica
	space func() map[uint32]*mgmtdpb.TargetSpace
	// lockWait is how long a new leader grants no lock, learning the ones
	// clients hold from their renewals (fsmeta.ReadLease).
	lockWait time.Duration
	// inlineMax is the largest file whose bytes a close may hand over to be
	// kept inline (inline.go); 0: none.
	inlineMax int
}

// NewService serves r.
func NewService(r *Replica) *Service {
	return &Service{r: r, lockWait: fsmeta.ReadLease, inlineMax: DefaultInlineMax}
}

// SetInlineMax sets the largest file the service keeps inline, its bytes
// in the metadata store instead of chunks (default DefaultInlineMax; 0 or
// less: none). Files kept inline stay so; new ones follow the setting.
func (s *Service) SetInlineMax(n int) { s.inlineMax = max(n, 0) }

// SetElectionWait sets how long a new leader grants no file lock, while it
// learns the locks clients hold from their renewals (default
// fsmeta.ReadLease; 0 or less: none, for a test cluster whose clients all
// start with it).
func (s *Service) SetElectionWait(d time.Duration) { s.lockWait = max(d, 0) }

// ReportSpace has Statfs answer with the storage targets' space as space
// returns it, by target (mgmtd.Detector.TargetSpace on the same replica):
// each target's disk, and their sum.
func (s *Service) ReportSpace(space func() map[uint32]*mgmtdpb.TargetSpace) { s.space = space }

// where turns a request's (at, path) into the inode to walk from and the
// path to walk: with at set, path is relative to directory inode at (as in
// openat(2); empty means at itself) and must not start with "/"; else it is
// absolute, the leading "/" optional (REST paths arrive without it). Every
// name in it must pass CheckName: empty names ("a//b"), "." and ".." are
// refused, not resolved, so no path climbs above "/" or above at, and a
// refused path proposes nothing. One trailing "/" is allowed.
func where(at uint64, p string) (uint64, string, error) {
	if len(p) > maxPath {
		return 0, "", fmt.Errorf("%w: path of %d bytes, limit %d", fsmeta.ErrNameTooLong, len(p), maxPath)
	}
	rest := p
	if at == 0 {
		rest = strings.TrimPrefix(p, "/")
	} else if strings.HasPrefix(p, "/") {
		return 0, "", fmt.Errorf("%w: absolute path %q relative to inode %d", fsmeta.ErrInvalidName, p, at)
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		if p != "" && p != "/" {
			return 0, "", fmt.Errorf("%w: path %q holds an empty name", fsmeta.ErrInvalidName, p)
		}
	} else {
		for name := range strings.SplitSeq(rest, "/") {
			if err := fsmeta.CheckName(name); err != nil {
				return 0, "", fmt.Errorf("path %q: %w", p, err)
			}
		}
	}
	if at == 0 {
		return RootIno, "/" + rest, nil
	}
	return at, rest, nil
}

// split is where cut into the parent's path and the last name.
func split(at uint64, p string) (base uint64, dir, name string, err error) {
	base, clean, err := where(at, p)
	if err != nil {
		return 0, "", "", err
	}
	if clean == "/" || clean == "" {
		return 0, "", "", fmt.Errorf("%w: %q names no entry", fsmeta.ErrInvalidName, p)
	}
	dir, name = path.Split(clean)
	return base, dir, name, nil
}

// resolve returns the inode a request's (at, path) names.
func (s *Service) resolve(ctx context.Context, at uint64, p string) (*metapb.Inode, error) {
	base, clean, err := where(at, p)
	if err != nil {
		return nil, err
	}
	var out *metapb.Inode
	err = s.r.Read(ctx, func(ns *Namespace) error {
		out, err = ns.ResolveAt(base, clean)
		return err
	})
	return out, err
}

// resolveParent returns the directory a request's (at, path) lies in, and
// its last name.
func (s *Service) resolveParent(ctx context.Context, at uint64, p string) (uint64, string, error) {
	base, dir, name, err := split(at, p)
	if err != nil {
		return 0, "", err
	}
	if dir == "" || dir == "/" {
		// A name in base itself (the mount's and the SDK's *At calls, or
		// a name in "/"): the command that follows checks, through the
		// log, that base is a directory, so a read here (and its leader
		// check: a round of heartbeats with more than one replica) would
		// only repeat it.
		return base, name, nil
	}
	var parent uint64
	err = s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.ResolveAt(base, dir)
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
	in, err := s.resolve(ctx, req.At, req.Path)
	return in, toStatus(err)
}

func (s *Service) BatchStat(ctx context.Context, req *metapb.BatchStatRequest) (*metapb.BatchStatReply, error) {
	if len(req.Paths) > 10000 {
		return nil, status.Error(codes.InvalidArgument, "at most 10000 paths per batch")
	}
	reply := &metapb.BatchStatReply{Inodes: make([]*metapb.Inode, len(req.Paths))}
	err := s.r.Read(ctx, func(ns *Namespace) error {
		for i, p := range req.Paths {
			_, clean, err := where(0, p)
			if err != nil {
				return fmt.Errorf("path %d of the batch: %w", i, err)
			}
			in, err := ns.Resolve(clean)
			if errors.Is(err, fsmeta.ErrNotFound) || errors.Is(err, fsmeta.ErrNotDir) {
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
	base, clean, err := where(req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	reply := &metapb.ListReply{}
	err = s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.ResolveAt(base, clean)
		if err != nil {
			return err
		}
		if reply.Entries, reply.More, err = ns.List(in.Ino, req.After, limit); err != nil || !req.WithInodes {
			return err
		}
		inos := make([]uint64, len(reply.Entries))
		for i, e := range reply.Entries {
			inos[i] = e.Ino
		}
		reply.Inodes, err = ns.BatchStat(inos)
		return err
	})
	return reply, toStatus(err)
}

func (s *Service) make(ctx context.Context, req *metapb.MakeRequest, dir bool) (*metapb.Inode, error) {
	if req.Tmpfile && !dir { // path names the directory; the file has no name
		d, err := s.resolve(ctx, req.At, req.Path)
		if err != nil {
			return nil, toStatus(err)
		}
		return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
			Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: d.Ino, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid, Tmpfile: true}}})
	}
	parent, name, err := s.resolveParent(ctx, req.At, req.Path)
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
	if strings.IndexByte(req.Target, 0) >= 0 {
		return nil, toStatus(fmt.Errorf("%w: symlink target %q holds NUL", fsmeta.ErrInvalidName, req.Target))
	}
	parent, name, err := s.resolveParent(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Symlink{Symlink: &metapb.SymlinkOp{Parent: parent, Name: name, Target: req.Target, Uid: req.Uid, Gid: req.Gid}}})
}

func (s *Service) remove(ctx context.Context, req *metapb.PathRequest, dir bool) (*metapb.Empty, error) {
	parent, name, err := s.resolveParent(ctx, req.At, req.Path)
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
	sp, sn, err := s.resolveParent(ctx, req.FromAt, req.From)
	if err != nil {
		return nil, toStatus(err)
	}
	dp, dn, err := s.resolveParent(ctx, req.ToAt, req.To)
	if err != nil {
		return nil, toStatus(err)
	}
	_, err = s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Rename{Rename: &metapb.RenameOp{SrcParent: sp, SrcName: sn, DstParent: dp, DstName: dn, NoReplace: req.NoReplace}}})
	return &metapb.Empty{}, err
}

func (s *Service) Status(ctx context.Context, req *metapb.StatusRequest) (*metapb.StatusReply, error) {
	addr, id := s.r.raft.LeaderWithID()
	reply := &metapb.StatusReply{Leader: string(id) + "@" + string(addr), State: s.r.raft.State().String(), AppliedIndex: s.r.AppliedIndex()}
	reply.Members, _ = s.r.Members()
	u, err := s.r.Namespace().Statfs()
	reply.Inodes = u.Inodes
	return reply, toStatus(err)
}

// KeepOpen renews the client's read leases (see ReadLease), its locks,
// and its word that it is alive, which keeps its write sessions open. Only
// the leader collects, so only the leader takes them.
func (s *Service) KeepOpen(ctx context.Context, req *metapb.KeepOpenRequest) (*metapb.Empty, error) {
	if !s.r.IsLeader() {
		return nil, toStatus(fsmeta.ErrNotLeader)
	}
	now := time.Now()
	s.r.locks.renew(s.r.raft.CurrentTerm(), req.Client, req.Locks, s.lockWait, now)
	return &metapb.Empty{}, toStatus(s.r.readers.renew(req.Inodes, now))
}

// Lock takes, changes or releases a file lock, or with test says what
// would conflict; see lockTable. Only the leader keeps locks.
func (s *Service) Lock(ctx context.Context, req *metapb.LockRequest) (*metapb.LockReply, error) {
	l := req.GetLock()
	if l == nil || l.Type > fsmeta.LockUnlock || l.Start > l.End {
		return nil, toStatus(fmt.Errorf("%w: lock %v", fabric.ErrBadRequest, l))
	}
	if !s.r.IsLeader() {
		return nil, toStatus(s.r.notLeader())
	}
	conflict, retry := s.r.locks.lock(s.r.raft.CurrentTerm(), l, req.Test, s.lockWait, time.Now())
	return &metapb.LockReply{Granted: conflict == nil && !retry && !req.Test, Conflict: conflict, Retry: retry}, nil
}

// Open looks the file up (with its chain table, so the client can place
// chunks) and, for writing, opens a write session named by the request's
// sequence number.
func (s *Service) Open(ctx context.Context, req *metapb.OpenRequest) (*metapb.OpenReply, error) {
	if req.Create {
		return s.createOpen(ctx, req)
	}
	reply := &metapb.OpenReply{}
	var err error
	if reply.Inode, err = s.resolve(ctx, req.At, req.Path); err != nil {
		return nil, toStatus(err)
	}
	switch reply.Inode.Type {
	case metapb.InodeType_FILE:
	case metapb.InodeType_DIRECTORY:
		return nil, toStatus(fmt.Errorf("open %s: %w", req.Path, fsmeta.ErrIsDir))
	default: // special files: the kernel opens them, not Sluice
		return nil, toStatus(fmt.Errorf("open %s (%v): %w", req.Path, reply.Inode.Type, fsmeta.ErrNotSupported))
	}
	if reply.Chains, err = s.chains(reply.Inode); err != nil {
		return nil, toStatus(err)
	}
	if req.Write {
		reply.Session = req.Seq
		if _, err := s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
			Op: &metapb.Command_OpenSession{OpenSession: &metapb.SessionOp{Ino: reply.Inode.Ino, Session: req.Seq, Client: req.Client}}}); err != nil {
			return nil, err
		}
	}
	if reply.Inode.Inline > 0 {
		// The bytes and the inode as of one moment, after the session
		// (a writer's close that ends the content comes after it).
		if reply.Inode, reply.Data, err = s.r.Namespace().Content(reply.Inode.Ino); err != nil {
			return nil, toStatus(err)
		}
	}
	reply.InlineMax = uint32(s.inlineMax)
	if !req.Write && s.r.IsLeader() {
		// The first read lease comes with the open; the client renews it
		// while the file stays open (KeepOpen).
		if err := s.r.readers.renew([]uint64{reply.Inode.Ino}, time.Now()); err != nil {
			return nil, toStatus(err)
		}
	}
	return reply, nil
}

// createOpen makes a file and opens it for writing in one command: one
// write to the log where create and open would take two.
func (s *Service) createOpen(ctx context.Context, req *metapb.OpenRequest) (*metapb.OpenReply, error) {
	if !req.Write {
		return nil, toStatus(fmt.Errorf("%w: create without write", fabric.ErrBadRequest))
	}
	parent, name, err := s.resolveParent(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	in, err := s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Create{Create: &metapb.CreateOp{Parent: parent, Name: name, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid, Session: req.Seq}}})
	if err != nil {
		return nil, err
	}
	reply := &metapb.OpenReply{Inode: in, Session: req.Seq, InlineMax: uint32(s.inlineMax)}
	if reply.Chains, err = s.chains(in); err != nil {
		return nil, toStatus(err)
	}
	return reply, nil
}

// chains is file in's chain table, in order.
func (s *Service) chains(in *metapb.Inode) ([]uint32, error) {
	m, err := s.r.ClusterMap()
	if err != nil {
		return nil, err
	}
	for _, t := range m.Tables {
		if t.Id == in.Layout.GetChainTable() {
			return t.Chains, nil
		}
	}
	return nil, nil
}

// Close ends a write session, setting the file's length if given.
// Lengths past fsmeta.MaxFileSize are refused here, before the log, so
// that the state machine applies old log entries as it always did.
func (s *Service) Close(ctx context.Context, req *metapb.CloseRequest) (*metapb.Empty, error) {
	if err := errors.Join(fsmeta.CheckSize(req.GetSize()), fsmeta.CheckSize(req.GetWritten())); err != nil {
		return nil, toStatus(fmt.Errorf("close inode %d: %w", req.Ino, err))
	}
	if req.Inline && (len(req.Data) > s.inlineMax || req.Size == nil) {
		return nil, toStatus(fmt.Errorf("close inode %d with %d bytes inline (at most %d kept, length %v): %w",
			req.Ino, len(req.Data), s.inlineMax, req.Size != nil, fsmeta.ErrNotInline))
	}
	if len(req.Ended) > fsmeta.MaxEnded {
		return nil, toStatus(fmt.Errorf("%w: close with %d other sessions ended, at most %d", fabric.ErrBadRequest, len(req.Ended), fsmeta.MaxEnded))
	}
	ended := make([]*metapb.SessionOp, len(req.Ended))
	for i, e := range req.Ended {
		ended[i] = &metapb.SessionOp{Ino: e.Ino, Session: e.Session}
	}
	_, err := s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_CloseSession{CloseSession: &metapb.SessionOp{Ino: req.Ino, Client: req.Client, Session: req.Session,
			Size: req.Size, Written: req.Written, Keep: req.KeepOpen, Inline: req.Inline, Data: req.Data, Ended: ended}}})
	return &metapb.Empty{}, err
}

// Setattr changes the attributes the request sets on the inode it names;
// a length past fsmeta.MaxFileSize is refused before the log.
func (s *Service) Setattr(ctx context.Context, req *metapb.SetattrRequest) (*metapb.Inode, error) {
	if err := fsmeta.CheckSize(req.GetSize()); err != nil {
		return nil, toStatus(fmt.Errorf("setattr %s: %w", req.Path, err))
	}
	in, err := s.resolve(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq, Op: &metapb.Command_Setattr{Setattr: &metapb.SetattrOp{
		Ino: in.Ino, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid, Size: req.Size, AtimeNs: req.AtimeNs, MtimeNs: req.MtimeNs}}})
}

// Link gives the file (path, at) the new name (new_path, new_at).
func (s *Service) Link(ctx context.Context, req *metapb.LinkRequest) (*metapb.Inode, error) {
	in, err := s.resolve(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	parent, name, err := s.resolveParent(ctx, req.NewAt, req.NewPath)
	if err != nil {
		return nil, toStatus(err)
	}
	return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq,
		Op: &metapb.Command_Link{Link: &metapb.LinkOp{Ino: in.Ino, Parent: parent, Name: name}}})
}

// Mknod makes a fifo, a device node, a socket file or (type FILE) an empty
// file.
func (s *Service) Mknod(ctx context.Context, req *metapb.MknodRequest) (*metapb.Inode, error) {
	parent, name, err := s.resolveParent(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	return s.do(ctx, &metapb.Command{Client: req.Client, Seq: req.Seq, Op: &metapb.Command_Mknod{Mknod: &metapb.MknodOp{
		Parent: parent, Name: name, Type: req.Type, Mode: req.Mode, Uid: req.Uid, Gid: req.Gid, Rdev: req.Rdev}}})
}

// GetXattr returns an extended attribute's value.
func (s *Service) GetXattr(ctx context.Context, req *metapb.XattrRequest) (*metapb.XattrReply, error) {
	if err := fsmeta.CheckXattrName(req.Name); err != nil {
		return nil, toStatus(err)
	}
	reply := &metapb.XattrReply{}
	err := s.readAt(ctx, req.At, req.Path, func(ns *Namespace, in *metapb.Inode) (err error) {
		reply.Value, err = ns.GetXattr(in.Ino, req.Name)
		return err
	})
	return reply, toStatus(err)
}

// ListXattr returns the names of an inode's extended attributes.
func (s *Service) ListXattr(ctx context.Context, req *metapb.PathRequest) (*metapb.XattrReply, error) {
	reply := &metapb.XattrReply{}
	err := s.readAt(ctx, req.At, req.Path, func(ns *Namespace, in *metapb.Inode) (err error) {
		reply.Names, err = ns.ListXattr(in.Ino)
		return err
	})
	return reply, toStatus(err)
}

// readAt resolves (at, p) and runs fn on the inode in the same read.
func (s *Service) readAt(ctx context.Context, at uint64, p string, fn func(*Namespace, *metapb.Inode) error) error {
	base, clean, err := where(at, p)
	if err != nil {
		return err
	}
	return s.r.Read(ctx, func(ns *Namespace) error {
		in, err := ns.ResolveAt(base, clean)
		if err != nil {
			return err
		}
		return fn(ns, in)
	})
}

// SetXattr sets an extended attribute; bad names, values and flags are
// refused before the log.
func (s *Service) SetXattr(ctx context.Context, req *metapb.XattrRequest) (*metapb.Empty, error) {
	if err := fsmeta.CheckXattr(req.Name, req.Value, req.Flags); err != nil {
		return nil, toStatus(err)
	}
	return s.xattrOp(ctx, req, func(op *metapb.XattrOp) *metapb.Command {
		return &metapb.Command{Op: &metapb.Command_SetXattr{SetXattr: op}}
	})
}

// RemoveXattr removes an extended attribute.
func (s *Service) RemoveXattr(ctx context.Context, req *metapb.XattrRequest) (*metapb.Empty, error) {
	if err := fsmeta.CheckXattrName(req.Name); err != nil {
		return nil, toStatus(err)
	}
	return s.xattrOp(ctx, req, func(op *metapb.XattrOp) *metapb.Command {
		return &metapb.Command{Op: &metapb.Command_RemoveXattr{RemoveXattr: op}}
	})
}

// xattrOp resolves the request's inode and proposes the command cmd makes.
func (s *Service) xattrOp(ctx context.Context, req *metapb.XattrRequest, cmd func(*metapb.XattrOp) *metapb.Command) (*metapb.Empty, error) {
	in, err := s.resolve(ctx, req.At, req.Path)
	if err != nil {
		return nil, toStatus(err)
	}
	c := cmd(&metapb.XattrOp{Ino: in.Ino, Name: req.Name, Value: req.Value, Flags: req.Flags})
	c.Client, c.Seq = req.Client, req.Seq
	_, err = s.do(ctx, c)
	return &metapb.Empty{}, err
}

// Statfs counts the namespace's inodes, files and bytes, and says how much
// the storage targets can hold (see ReportSpace).
func (s *Service) Statfs(ctx context.Context, req *metapb.StatfsRequest) (*metapb.StatfsReply, error) {
	var u Usage
	err := s.r.Read(ctx, func(ns *Namespace) error {
		var err error
		u, err = ns.Statfs()
		return err
	})
	reply := &metapb.StatfsReply{Inodes: u.Inodes, Files: u.Files, Bytes: u.Bytes, InlineFiles: u.InlineFiles, InlineBytes: u.InlineBytes}
	if s.space != nil && err == nil {
		var total, free uint64
		targets := s.space()
		for id, sp := range targets {
			total, free = total+sp.TotalBytes, free+sp.FreeBytes
			reply.TargetSpace = append(reply.TargetSpace, &metapb.TargetSpace{Target: id, TotalBytes: sp.TotalBytes, FreeBytes: sp.FreeBytes})
		}
		slices.SortFunc(reply.TargetSpace, func(a, b *metapb.TargetSpace) int { return cmp.Compare(a.Target, b.Target) })
		// Every byte is stored once per replica: count by the longest
		// chains, so the figure never promises more than fits.
		replicas := uint64(1)
		if m, err := s.r.ClusterMap(); err == nil {
			for _, t := range m.Tables {
				replicas = max(replicas, uint64(t.Replicas))
			}
		}
		reply.CapacityBytes, reply.FreeBytes, reply.TargetsReporting = total/replicas, free/replicas, uint32(len(targets))
	}
	return reply, toStatus(err)
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
	case errors.Is(err, fsmeta.ErrNotFound), errors.Is(err, fsmeta.ErrStale):
		code = codes.NotFound
	case errors.Is(err, fsmeta.ErrExist):
		code = codes.AlreadyExists
	case errors.Is(err, fsmeta.ErrInvalidName), errors.Is(err, fsmeta.ErrNameTooLong), errors.Is(err, fabric.ErrBadRequest):
		code = codes.InvalidArgument
	case errors.Is(err, fsmeta.ErrNotDir), errors.Is(err, fsmeta.ErrIsDir), errors.Is(err, fsmeta.ErrNotEmpty), errors.Is(err, fsmeta.ErrLoop),
		errors.Is(err, fsmeta.ErrNotInline):
		code = codes.FailedPrecondition
	case errors.Is(err, fsmeta.ErrNotLeader):
		code = codes.Unavailable
	case errors.Is(err, fsmeta.ErrTooManyLeases):
		code = codes.ResourceExhausted
	case errors.Is(err, fsmeta.ErrFileTooLarge), errors.Is(err, fsmeta.ErrXattrRange), errors.Is(err, fsmeta.ErrXattrTooBig):
		code = codes.OutOfRange
	case errors.Is(err, fsmeta.ErrNoXattr):
		code = codes.FailedPrecondition // not NotFound: ENODATA, not ENOENT
	case errors.Is(err, fsmeta.ErrNotSupported):
		code = codes.Unimplemented
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	st := status.New(code, err.Error())
	// The namespace's own condition travels as a detail, so that a client
	// can tell ENOTEMPTY from ENOTDIR where the gRPC code is the same.
	var fe *fabric.Error
	if errors.As(err, &fe) {
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: fsmeta.ErrorDomain, Reason: strconv.Itoa(int(fe.Code))}); derr == nil {
			st = d
		}
	}
	return st.Err()
}
