package meta

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/proto/metapb"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// FSM applies namespace Commands from the Raft log. Its Pebble database is
// state derived from the log: Raft rebuilds it from the last snapshot and
// the log after it, so NewFSM starts from an empty database.
//
// Each client's last command and result are kept in the state ("q" +
// client), so a retried command (same client and sequence number) returns
// the first result instead of applying twice, on every replica alike. A
// client retries only its last command; commands of one client that race
// each other (several goroutines) each carry their own number and are all
// applied.
type FSM struct {
	db      *pebble.DB
	ns      *Namespace
	cluster *mgmtd.ClusterMap
	applied atomic.Uint64 // the last log index applied (Raft's own counter runs ahead of the FSM)
	// rootTimed: the root directory's times are known to be set (see
	// Namespace.StampRoot); only the apply goroutine touches it.
	rootTimed bool
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM clears db and starts the namespace in it.
func NewFSM(db *pebble.DB, rootLayout *metapb.Layout) (*FSM, error) {
	if err := clearAll(db); err != nil {
		return nil, err
	}
	ns, err := Open(db, rootLayout, 0)
	if err != nil {
		return nil, err
	}
	return &FSM{db: db, ns: ns, cluster: mgmtd.NewClusterMap(db)}, nil
}

// Namespace is the state, for reads.
func (f *FSM) Namespace() *Namespace { return f.ns }

func clearAll(db *pebble.DB) error {
	if err := db.DeleteRange([]byte{0}, []byte{0xff}, pebble.NoSync); err != nil {
		return fmt.Errorf("clear namespace state: %w", err)
	}
	return nil
}

// appliedKey holds the last applied index, so that a snapshot carries it.
var appliedKey = []byte("a")

// Applied is the last log index whose command has been applied.
func (f *FSM) Applied() uint64 { return f.applied.Load() }

func (f *FSM) setApplied(index uint64) {
	f.db.Set(appliedKey, binary.BigEndian.AppendUint64(nil, index), pebble.NoSync)
	f.applied.Store(index)
}

func sessionKey(client uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'q'}, client) }

// Apply runs one command; it returns the *metapb.Result.
func (f *FSM) Apply(l *raft.Log) interface{} {
	defer f.setApplied(l.Index)
	cmd := &metapb.Command{}
	if err := proto.Unmarshal(l.Data, cmd); err != nil {
		return errResult(fmt.Errorf("%w: command at index %d: %v", fabric.ErrBadRequest, l.Index, err))
	}
	if cmd.Client != 0 {
		if v, err := get(dbReader{f.db}, sessionKey(cmd.Client)); err == nil && v != nil {
			prev := &metapb.Result{}
			if proto.Unmarshal(v, prev) == nil && prev.Seq == cmd.Seq {
				return prev // a retry of the client's last command: the first answer
			}
		}
	}
	if !f.rootTimed && cmd.NowNs != 0 {
		f.rootTimed = f.ns.StampRoot(cmd.NowNs) == nil
	}
	res := f.apply(cmd)
	res.Seq = cmd.Seq
	if cmd.Client != 0 {
		if v, err := proto.Marshal(res); err == nil {
			f.db.Set(sessionKey(cmd.Client), v, pebble.NoSync)
		}
	}
	return res
}

func errResult(err error) *metapb.Result {
	return &metapb.Result{Code: uint32(fabric.CodeOf(err)), Error: err.Error()}
}

func (f *FSM) apply(cmd *metapb.Command) *metapb.Result {
	now := cmd.NowNs
	var in *metapb.Inode
	var err error
	switch op := cmd.Op.(type) {
	case *metapb.Command_Mkdir:
		in, err = f.ns.Mkdir(op.Mkdir.Parent, op.Mkdir.Name, Attrs{Mode: op.Mkdir.Mode, UID: op.Mkdir.Uid, GID: op.Mkdir.Gid, Now: now})
	case *metapb.Command_Create:
		a := Attrs{Mode: op.Create.Mode, UID: op.Create.Uid, GID: op.Create.Gid, Now: now}
		w := Writer{Client: cmd.Client, Session: op.Create.Session}
		if op.Create.Tmpfile {
			in, err = f.ns.CreateTemp(op.Create.Parent, a, w)
		} else {
			in, err = f.ns.CreateOpen(op.Create.Parent, op.Create.Name, a, w)
		}
	case *metapb.Command_Mknod:
		m := op.Mknod
		in, err = f.ns.Mknod(m.Parent, m.Name, m.Type, m.Rdev, Attrs{Mode: m.Mode, UID: m.Uid, GID: m.Gid, Now: now})
	case *metapb.Command_SetXattr:
		x := op.SetXattr
		err = f.ns.SetXattr(x.Ino, x.Name, x.Value, x.Flags, now)
	case *metapb.Command_RemoveXattr:
		err = f.ns.RemoveXattr(op.RemoveXattr.Ino, op.RemoveXattr.Name, now)
	case *metapb.Command_Symlink:
		in, err = f.ns.Symlink(op.Symlink.Parent, op.Symlink.Name, op.Symlink.Target, Attrs{Mode: 0o777, UID: op.Symlink.Uid, GID: op.Symlink.Gid, Now: now})
	case *metapb.Command_Link:
		in, err = f.ns.Link(op.Link.Ino, op.Link.Parent, op.Link.Name, now)
	case *metapb.Command_Unlink:
		err = f.ns.Unlink(op.Unlink.Parent, op.Unlink.Name, now)
	case *metapb.Command_Rmdir:
		err = f.ns.Rmdir(op.Rmdir.Parent, op.Rmdir.Name, now)
	case *metapb.Command_Rename:
		if op.Rename.NoReplace {
			err = f.ns.RenameNoReplace(op.Rename.SrcParent, op.Rename.SrcName, op.Rename.DstParent, op.Rename.DstName, now)
		} else {
			err = f.ns.Rename(op.Rename.SrcParent, op.Rename.SrcName, op.Rename.DstParent, op.Rename.DstName, now)
		}
	case *metapb.Command_Setattr:
		s := op.Setattr
		in, err = f.ns.Setattr(s.Ino, SetAttr{Mode: s.Mode, UID: s.Uid, GID: s.Gid, Size: s.Size, Atime: s.AtimeNs, Mtime: s.MtimeNs}, now)
	case *metapb.Command_Collected:
		err = f.ns.Collected(op.Collected)
	case *metapb.Command_Cluster:
		err = f.cluster.Apply(op.Cluster)
	case *metapb.Command_OpenSession:
		err = f.ns.OpenSession(op.OpenSession.Ino, op.OpenSession.Client, op.OpenSession.Session, now)
	case *metapb.Command_CloseSession:
		c := op.CloseSession
		for _, e := range c.Ended { // first: one of them may be on the file this close hands over
			if err := f.ns.EndSession(e.Ino, c.Client, e.Session); err != nil {
				return errResult(err)
			}
		}
		if c.Inline {
			err = f.ns.CloseInline(c.Ino, c.Client, c.Session, c.Data, c.GetSize(), c.Keep, now)
		} else {
			err = f.ns.CloseSession(c.Ino, c.Client, c.Session, c.Size, c.Written, c.Keep, now)
		}
	case *metapb.Command_PruneClient:
		err = f.ns.PruneClient(op.PruneClient)
	default:
		err = fmt.Errorf("%w: empty command", fabric.ErrBadRequest)
	}
	if err != nil {
		return errResult(err)
	}
	return &metapb.Result{Inode: in}
}

// Snapshot captures the state as of now (a Pebble snapshot; Persist
// streams it).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{snap: f.db.NewSnapshot()}, nil
}

type fsmSnapshot struct{ snap *pebble.Snapshot }

// Persist writes every key and value, each length-prefixed.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := func() error {
		it, err := s.snap.NewIter(nil)
		if err != nil {
			return err
		}
		defer it.Close()
		w := bufio.NewWriter(sink)
		var n [4]byte
		for it.First(); it.Valid(); it.Next() {
			for _, b := range [][]byte{it.Key(), it.Value()} {
				binary.BigEndian.PutUint32(n[:], uint32(len(b)))
				w.Write(n[:])
				w.Write(b)
			}
		}
		if err := it.Error(); err != nil {
			return err
		}
		return w.Flush()
	}()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist namespace snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() { s.snap.Close() }

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	if err := clearAll(f.db); err != nil {
		return err
	}
	br := bufio.NewReader(r)
	b := f.db.NewBatch()
	defer func() { b.Close() }()
	read := func() ([]byte, error) {
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return nil, err
		}
		v := make([]byte, binary.BigEndian.Uint32(n[:]))
		_, err := io.ReadFull(br, v)
		return v, err
	}
	for {
		k, err := read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("restore namespace snapshot: %w", err)
		}
		v, err := read()
		if err != nil {
			return fmt.Errorf("restore namespace snapshot: %w", err)
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() > 16<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = f.db.NewBatch()
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	f.cluster.Notify()
	f.rootTimed = false
	v, err := get(dbReader{f.db}, appliedKey)
	if err == nil && len(v) == 8 {
		f.applied.Store(binary.BigEndian.Uint64(v))
	}
	return nil
}
