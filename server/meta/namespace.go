package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicefs/sluice/fsmeta"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/metapb"
)

// RootIno is the root directory's inode number.
const RootIno = 1

const maxPath = 4096

// Namespace is the namespace state machine on a Pebble database.
type Namespace struct {
	db *pebble.DB
	// DefaultLayout is what the root directory's files get (and pass on).
	defaultLayout *metapb.Layout
}

// Open opens (or creates, with a root directory stamped now) the namespace
// in db.
func Open(db *pebble.DB, rootLayout *metapb.Layout, now int64) (*Namespace, error) {
	ns := &Namespace{db: db, defaultLayout: rootLayout}
	if _, err := ns.Stat(RootIno); errors.Is(err, fsmeta.ErrStale) {
		b := db.NewBatch()
		defer b.Close()
		root := &metapb.Inode{Ino: RootIno, Type: metapb.InodeType_DIRECTORY, Mode: 0o755, Nlink: 2,
			AtimeNs: now, MtimeNs: now, CtimeNs: now, Layout: rootLayout, Parent: RootIno}
		if err := putInode(b, root); err != nil {
			return nil, err
		}
		if err := b.Set([]byte("n"), binary.BigEndian.AppendUint64(nil, RootIno+1), nil); err != nil {
			return nil, err
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return nil, fmt.Errorf("create root: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	return ns, nil
}

// StampRoot sets the root directory's times to now if they were never set:
// the root is made without a time (every replica makes it alike, outside
// the log), so the first command applied, moments after the group is
// formatted, gives it the leader's clock. All replicas apply that command
// alike, so they agree; a group formatted before this was kept gets its
// root stamped by its next command.
func (ns *Namespace) StampRoot(now int64) error {
	return ns.write(func(b *pebble.Batch) error {
		root, err := loadInode(batchReader{b}, RootIno)
		if err != nil || root.AtimeNs != 0 || root.MtimeNs != 0 || root.CtimeNs != 0 {
			return err
		}
		root.AtimeNs, root.MtimeNs, root.CtimeNs = now, now, now
		return putInode(b, root)
	})
}

func inodeKey(ino uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'i'}, ino) }

func direntKey(parent uint64, name string) []byte {
	return append(binary.BigEndian.AppendUint64([]byte{'d'}, parent), name...)
}

func gcKey(ino uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'g'}, ino) }

// reader is what a read sees: the database or a batch being built.
type reader interface {
	Get(key []byte) ([]byte, interface{ Close() error }, error)
}

type dbReader struct{ db *pebble.DB }

func (r dbReader) Get(k []byte) ([]byte, interface{ Close() error }, error) {
	v, c, err := r.db.Get(k)
	return v, c, err
}

func get(r reader, k []byte) ([]byte, error) {
	v, c, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return bytes.Clone(v), nil
}

func loadInode(r reader, ino uint64) (*metapb.Inode, error) {
	v, err := get(r, inodeKey(ino))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("inode %d: %w", ino, fsmeta.ErrStale)
	}
	in := &metapb.Inode{}
	if err := proto.Unmarshal(v, in); err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	return in, nil
}

func putInode(b *pebble.Batch, in *metapb.Inode) error {
	v, err := proto.Marshal(in)
	if err != nil {
		return err
	}
	return b.Set(inodeKey(in.Ino), v, nil)
}

// lookup returns the child of dir called name, or ErrNotFound.
func lookup(r reader, dir uint64, name string) (uint64, metapb.InodeType, error) {
	v, err := get(r, direntKey(dir, name))
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 9 {
		return 0, 0, fmt.Errorf("%q in directory %d: %w", name, dir, fsmeta.ErrNotFound)
	}
	return binary.BigEndian.Uint64(v), metapb.InodeType(v[8]), nil
}

func putDirent(b *pebble.Batch, dir uint64, name string, ino uint64, t metapb.InodeType) error {
	return b.Set(direntKey(dir, name), append(binary.BigEndian.AppendUint64(nil, ino), byte(t)), nil)
}

// write runs fn on a batch the caller's reads see, and commits it. The
// batch is not synced: the Raft log is what makes a mutation durable.
func (ns *Namespace) write(fn func(b *pebble.Batch) error) error {
	b := ns.db.NewIndexedBatch()
	defer b.Close()
	if err := fn(b); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

type batchReader struct{ b *pebble.Batch }

func (r batchReader) Get(k []byte) ([]byte, interface{ Close() error }, error) {
	v, c, err := r.b.Get(k)
	return v, c, err
}

func (ns *Namespace) nextIno(b *pebble.Batch) (uint64, error) {
	v, err := get(batchReader{b}, []byte("n"))
	if err != nil || len(v) != 8 {
		return 0, fmt.Errorf("inode counter: %v", err)
	}
	ino := binary.BigEndian.Uint64(v)
	return ino, b.Set([]byte("n"), binary.BigEndian.AppendUint64(nil, ino+1), nil)
}

// dirOf loads ino and checks it is a directory.
func dirOf(r reader, ino uint64) (*metapb.Inode, error) {
	d, err := loadInode(r, ino)
	if err != nil {
		return nil, err
	}
	if d.Type != metapb.InodeType_DIRECTORY {
		return nil, fmt.Errorf("inode %d: %w", ino, fsmeta.ErrNotDir)
	}
	return d, nil
}

// Attrs are the attributes a new inode gets.
type Attrs struct {
	Mode     uint32
	UID, GID uint32
	Now      int64 // nanoseconds; chosen by the caller so replicas agree
}

// Writer names the write session a file's creation opens in the same
// step, as open(2) with O_CREAT does: the client's, numbered Session (none
// when 0).
type Writer struct{ Client, Session uint64 }

// make adds a new inode of type t called name in parent, and opens w on
// it.
func (ns *Namespace) make(parent uint64, name string, t metapb.InodeType, a Attrs, w Writer, fill func(in, dir *metapb.Inode)) (*metapb.Inode, error) {
	if err := fsmeta.CheckName(name); err != nil {
		return nil, err
	}
	var out *metapb.Inode
	err := ns.write(func(b *pebble.Batch) error {
		r := batchReader{b}
		dir, err := dirOf(r, parent)
		if err != nil {
			return err
		}
		if _, _, err := lookup(r, parent, name); err == nil {
			return fmt.Errorf("%q in directory %d: %w", name, parent, fsmeta.ErrExist)
		} else if !errors.Is(err, fsmeta.ErrNotFound) {
			return err
		}
		ino, err := ns.nextIno(b)
		if err != nil {
			return err
		}
		in := &metapb.Inode{Ino: ino, Type: t, Mode: a.Mode, Uid: a.UID, Gid: a.GID, Nlink: 1,
			AtimeNs: a.Now, MtimeNs: a.Now, CtimeNs: a.Now}
		fill(in, dir)
		dir.MtimeNs, dir.CtimeNs = a.Now, a.Now
		if err := putInode(b, in); err != nil {
			return err
		}
		if err := putInode(b, dir); err != nil {
			return err
		}
		if err := putSession(b, ino, w, a.Now); err != nil {
			return err
		}
		out = in
		return putDirent(b, parent, name, ino, t)
	})
	return out, err
}

// Mkdir makes a directory; it inherits its parent's layout.
func (ns *Namespace) Mkdir(parent uint64, name string, a Attrs) (*metapb.Inode, error) {
	return ns.make(parent, name, metapb.InodeType_DIRECTORY, a, Writer{}, func(in, dir *metapb.Inode) {
		in.Nlink, in.Layout, in.Parent = 2, dir.Layout, dir.Ino
		dir.Nlink++
	})
}

// Create makes an empty file with its directory's layout, nothing
// written yet.
func (ns *Namespace) Create(parent uint64, name string, a Attrs) (*metapb.Inode, error) {
	return ns.CreateOpen(parent, name, a, Writer{})
}

// CreateOpen is Create, opening write session w on the new file in the
// same step.
func (ns *Namespace) CreateOpen(parent uint64, name string, a Attrs, w Writer) (*metapb.Inode, error) {
	return ns.make(parent, name, metapb.InodeType_FILE, a, w, func(in, dir *metapb.Inode) {
		in.Layout, in.Written = dir.Layout, new(uint64(0))
	})
}

// CreateTemp makes a file with no name in directory dir, as open(2) with
// O_TMPFILE does: it has no link, so it waits in the collector's queue from
// the start (the collector leaves it while it is open), and Link, giving it
// a name, takes it out again.
// It opens write session w on the file in the same step.
func (ns *Namespace) CreateTemp(dir uint64, a Attrs, w Writer) (*metapb.Inode, error) {
	var out *metapb.Inode
	err := ns.write(func(b *pebble.Batch) error {
		d, err := dirOf(batchReader{b}, dir)
		if err != nil {
			return err
		}
		ino, err := ns.nextIno(b)
		if err != nil {
			return err
		}
		out = &metapb.Inode{Ino: ino, Type: metapb.InodeType_FILE, Mode: a.Mode, Uid: a.UID, Gid: a.GID,
			AtimeNs: a.Now, MtimeNs: a.Now, CtimeNs: a.Now, Layout: d.Layout, Written: new(uint64(0))}
		if err := putInode(b, out); err != nil {
			return err
		}
		if err := putSession(b, ino, w, a.Now); err != nil {
			return err
		}
		return queue(b, out)
	})
	return out, err
}

// queue puts file in's record in the collector's queue (or updates it).
func queue(b *pebble.Batch, in *metapb.Inode) error {
	v, err := proto.Marshal(in)
	if err != nil {
		return err
	}
	return b.Set(gcKey(in.Ino), v, nil)
}

// Mknod makes a special file of type t (a fifo, a device node with device
// number rdev, or a socket), or with t FILE an empty file as Create does.
func (ns *Namespace) Mknod(parent uint64, name string, t metapb.InodeType, rdev uint32, a Attrs) (*metapb.Inode, error) {
	switch t {
	case metapb.InodeType_FILE:
		return ns.Create(parent, name, a)
	case metapb.InodeType_CHAR_DEVICE, metapb.InodeType_BLOCK_DEVICE:
	case metapb.InodeType_FIFO, metapb.InodeType_SOCKET:
		rdev = 0
	default:
		return nil, fmt.Errorf("%w: mknod of type %v", fsmeta.ErrInvalidName, t)
	}
	return ns.make(parent, name, t, a, Writer{}, func(in, dir *metapb.Inode) { in.Rdev = rdev })
}

// Symlink makes a symbolic link to target.
func (ns *Namespace) Symlink(parent uint64, name, target string, a Attrs) (*metapb.Inode, error) {
	if target == "" || len(target) > maxPath {
		return nil, fmt.Errorf("%w: symlink target of %d bytes", fsmeta.ErrInvalidName, len(target))
	}
	return ns.make(parent, name, metapb.InodeType_SYMLINK, a, Writer{}, func(in, dir *metapb.Inode) {
		in.Target, in.Size = target, uint64(len(target))
	})
}

// Link adds name in parent as another name of file ino.
func (ns *Namespace) Link(ino, parent uint64, name string, now int64) (*metapb.Inode, error) {
	if err := fsmeta.CheckName(name); err != nil {
		return nil, err
	}
	var out *metapb.Inode
	err := ns.write(func(b *pebble.Batch) error {
		r := batchReader{b}
		in, err := loadInode(r, ino)
		if err != nil {
			return err
		}
		if in.Type == metapb.InodeType_DIRECTORY {
			return fmt.Errorf("hard link to directory %d: %w", ino, fsmeta.ErrIsDir)
		}
		if in.Nlink == 0 { // a file made with no name (CreateTemp) gets one
			if err := b.Delete(gcKey(ino), nil); err != nil {
				return err
			}
		}
		dir, err := dirOf(r, parent)
		if err != nil {
			return err
		}
		if _, _, err := lookup(r, parent, name); err == nil {
			return fmt.Errorf("%q in directory %d: %w", name, parent, fsmeta.ErrExist)
		}
		in.Nlink++
		in.CtimeNs = now
		dir.MtimeNs, dir.CtimeNs = now, now
		if err := putInode(b, in); err != nil {
			return err
		}
		if err := putInode(b, dir); err != nil {
			return err
		}
		out = in
		return putDirent(b, parent, name, ino, in.Type)
	})
	return out, err
}

// Lookup returns the inode called name in parent.
func (ns *Namespace) Lookup(parent uint64, name string) (*metapb.Inode, error) {
	r := dbReader{ns.db}
	if _, err := dirOf(r, parent); err != nil {
		return nil, err
	}
	ino, _, err := lookup(r, parent, name)
	if err != nil {
		return nil, err
	}
	return loadInode(r, ino)
}

// Stat returns inode ino; ErrStale if there is none.
func (ns *Namespace) Stat(ino uint64) (*metapb.Inode, error) {
	return loadInode(dbReader{ns.db}, ino)
}

// BatchStat returns the inodes of inos, nil for any that do not exist.
func (ns *Namespace) BatchStat(inos []uint64) ([]*metapb.Inode, error) {
	out := make([]*metapb.Inode, len(inos))
	for i, ino := range inos {
		in, err := ns.Stat(ino)
		if errors.Is(err, fsmeta.ErrStale) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = in
	}
	return out, nil
}

// Resolve walks an absolute path (symlinks are not followed).
func (ns *Namespace) Resolve(path string) (*metapb.Inode, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%w: %q is not absolute", fsmeta.ErrInvalidName, path)
	}
	return ns.ResolveAt(RootIno, path)
}

// ResolveAt walks path from directory at, as openat(2) does (symlinks are
// not followed); an empty path is at itself.
func (ns *Namespace) ResolveAt(at uint64, path string) (*metapb.Inode, error) {
	if len(path) > maxPath {
		return nil, fmt.Errorf("%w: path of %d bytes, limit %d", fsmeta.ErrNameTooLong, len(path), maxPath)
	}
	in, err := ns.Stat(at)
	for _, part := range strings.Split(path, "/") {
		if err != nil || part == "" {
			continue
		}
		if len(part) > fsmeta.MaxName {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", fsmeta.ErrNameTooLong, len(part), fsmeta.MaxName)
		}
		in, err = ns.Lookup(in.Ino, part)
	}
	return in, err
}

// List returns up to limit entries of dir after the name after (exclusive),
// in name order, and whether there are more.
func (ns *Namespace) List(dir uint64, after string, limit int) ([]*metapb.DirEntry, bool, error) {
	if _, err := dirOf(dbReader{ns.db}, dir); err != nil {
		return nil, false, err
	}
	prefix := binary.BigEndian.AppendUint64([]byte{'d'}, dir)
	lower := append(bytes.Clone(prefix), after...)
	if after != "" {
		lower = append(lower, 0)
	}
	upper := binary.BigEndian.AppendUint64([]byte{'d'}, dir+1)
	it, err := ns.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	var out []*metapb.DirEntry
	for it.First(); it.Valid(); it.Next() {
		if len(out) == limit {
			return out, true, nil
		}
		v := it.Value()
		out = append(out, &metapb.DirEntry{Name: string(it.Key()[len(prefix):]), Ino: binary.BigEndian.Uint64(v), Type: metapb.InodeType(v[8])})
	}
	return out, false, it.Error()
}

// Unlink removes name (not a directory) from parent. A file whose last
// link goes is queued for the chunk collector.
func (ns *Namespace) Unlink(parent uint64, name string, now int64) error {
	return ns.remove(parent, name, now, false)
}

// Rmdir removes the empty directory name from parent.
func (ns *Namespace) Rmdir(parent uint64, name string, now int64) error {
	return ns.remove(parent, name, now, true)
}

func (ns *Namespace) remove(parent uint64, name string, now int64, wantDir bool) error {
	if err := fsmeta.CheckName(name); err != nil {
		return err
	}
	return ns.write(func(b *pebble.Batch) error {
		r := batchReader{b}
		dir, err := dirOf(r, parent)
		if err != nil {
			return err
		}
		ino, t, err := lookup(r, parent, name)
		if err != nil {
			return err
		}
		isDir := t == metapb.InodeType_DIRECTORY
		if isDir && !wantDir {
			return fmt.Errorf("unlink %q: %w", name, fsmeta.ErrIsDir)
		}
		if !isDir && wantDir {
			return fmt.Errorf("rmdir %q: %w", name, fsmeta.ErrNotDir)
		}
		if err := ns.drop(b, dir, name, ino, now); err != nil {
			return err
		}
		return putInode(b, dir)
	})
}

// drop removes entry name -> ino from dir (whose inode the caller saves)
// and releases the inode's link.
func (ns *Namespace) drop(b *pebble.Batch, dir *metapb.Inode, name string, ino uint64, now int64) error {
	r := batchReader{b}
	in, err := loadInode(r, ino)
	if err != nil {
		return err
	}
	if in.Type == metapb.InodeType_DIRECTORY {
		if empty, err := ns.emptyDir(b, ino); err != nil {
			return err
		} else if !empty {
			return fmt.Errorf("directory %q: %w", name, fsmeta.ErrNotEmpty)
		}
		dir.Nlink--
	}
	if err := b.Delete(direntKey(dir.Ino, name), nil); err != nil {
		return err
	}
	dir.MtimeNs, dir.CtimeNs = now, now
	in.CtimeNs = now
	if in.Type == metapb.InodeType_DIRECTORY || in.Nlink <= 1 {
		if err := b.Delete(inodeKey(ino), nil); err != nil {
			return err
		}
		if err := dropXattrs(b, ino); err != nil {
			return err
		}
		if in.Type == metapb.InodeType_FILE {
			if err := setContent(b, in, nil); err != nil { // handles open on it hold their copy
				return err
			}
			// A file that never stored a byte in chunks (an inline or an
			// empty one) and that no writer holds leaves the collector
			// nothing to remove: no record, no command to retire it.
			if Written(in) == 0 {
				if open, err := sessionsOn(b, ino, nil); err != nil || !open {
					return err
				}
			}
			return queue(b, in)
		}
		return nil
	}
	in.Nlink--
	return putInode(b, in)
}

func (ns *Namespace) emptyDir(b *pebble.Batch, ino uint64) (bool, error) {
	it, err := b.NewIter(&pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64([]byte{'d'}, ino),
		UpperBound: binary.BigEndian.AppendUint64([]byte{'d'}, ino+1),
	})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// Rename moves srcName in srcParent to dstName in dstParent, atomically,
// replacing a file there, or an empty directory by a directory.
func (ns *Namespace) Rename(srcParent uint64, srcName string, dstParent uint64, dstName string, now int64) error {
	return ns.rename(srcParent, srcName, dstParent, dstName, false, now)
}

// RenameNoReplace is Rename that fails with ErrExist, changing nothing,
// when dstName exists (renameat2's RENAME_NOREPLACE): the check and the
// rename are one batch, so no other name can appear in between.
func (ns *Namespace) RenameNoReplace(srcParent uint64, srcName string, dstParent uint64, dstName string, now int64) error {
	return ns.rename(srcParent, srcName, dstParent, dstName, true, now)
}

func (ns *Namespace) rename(srcParent uint64, srcName string, dstParent uint64, dstName string, noReplace bool, now int64) error {
	if err := fsmeta.CheckName(srcName); err != nil {
		return err
	}
	if err := fsmeta.CheckName(dstName); err != nil {
		return err
	}
	return ns.write(func(b *pebble.Batch) error {
		r := batchReader{b}
		src, err := dirOf(r, srcParent)
		if err != nil {
			return err
		}
		dst := src
		if dstParent != srcParent {
			if dst, err = dirOf(r, dstParent); err != nil {
				return err
			}
		}
		ino, t, err := lookup(r, srcParent, srcName)
		if err != nil {
			return err
		}
		if noReplace {
			if _, _, err := lookup(r, dstParent, dstName); err == nil {
				return fmt.Errorf("rename to %q: %w", dstName, fsmeta.ErrExist)
			} else if !errors.Is(err, fsmeta.ErrNotFound) {
				return err
			}
		}
		if srcParent == dstParent && srcName == dstName {
			return nil
		}
		isDir := t == metapb.InodeType_DIRECTORY
		if isDir {
			// Refuse to move a directory under itself: walk up from dst.
			for d := dst; ; {
				if d.Ino == ino {
					return fmt.Errorf("rename %q into %d: %w", srcName, dstParent, fsmeta.ErrLoop)
				}
				if d.Ino == RootIno {
					break
				}
				if d, err = dirOf(r, d.Parent); err != nil {
					return err
				}
			}
		}
		if old, ot, err := lookup(r, dstParent, dstName); err == nil {
			if old == ino {
				return nil // two names of one file: nothing to do (POSIX)
			}
			oldDir := ot == metapb.InodeType_DIRECTORY
			if isDir && !oldDir {
				return fmt.Errorf("rename directory over %q: %w", dstName, fsmeta.ErrNotDir)
			}
			if !isDir && oldDir {
				return fmt.Errorf("rename over directory %q: %w", dstName, fsmeta.ErrIsDir)
			}
			if err := ns.drop(b, dst, dstName, old, now); err != nil {
				return err
			}
		} else if !errors.Is(err, fsmeta.ErrNotFound) {
			return err
		}
		if err := b.Delete(direntKey(srcParent, srcName), nil); err != nil {
			return err
		}
		if err := putDirent(b, dstParent, dstName, ino, t); err != nil {
			return err
		}
		in, err := loadInode(r, ino)
		if err != nil {
			return err
		}
		in.CtimeNs = now
		if isDir && srcParent != dstParent {
			in.Parent = dstParent
			src.Nlink--
			dst.Nlink++
		}
		if err := putInode(b, in); err != nil {
			return err
		}
		src.MtimeNs, src.CtimeNs = now, now
		dst.MtimeNs, dst.CtimeNs = now, now
		if err := putInode(b, src); err != nil {
			return err
		}
		if dst != src {
			return putInode(b, dst)
		}
		return nil
	})
}

// SetAttr changes the attributes set in s of inode ino.
type SetAttr struct {
	Mode, UID, GID *uint32
	Size           *uint64
	Atime, Mtime   *int64
}

// Setattr applies s to ino; a size change (truncate) is for files only.
func (ns *Namespace) Setattr(ino uint64, s SetAttr, now int64) (*metapb.Inode, error) {
	var out *metapb.Inode
	err := ns.write(func(b *pebble.Batch) error {
		in, err := loadInode(batchReader{b}, ino)
		if err != nil {
			return err
		}
		if s.Mode != nil {
			in.Mode = *s.Mode & 0o7777
		}
		if s.UID != nil {
			in.Uid = *s.UID
		}
		if s.GID != nil {
			in.Gid = *s.GID
		}
		if s.Size != nil {
			if in.Type != metapb.InodeType_FILE {
				return fmt.Errorf("truncate inode %d: %w", ino, fsmeta.ErrIsDir)
			}
			if err := cutContent(b, in, *s.Size); err != nil {
				return err
			}
			in.Size = *s.Size
			in.MtimeNs = now
		}
		if s.Atime != nil {
			in.AtimeNs = *s.Atime
		}
		if s.Mtime != nil {
			in.MtimeNs = *s.Mtime
		}
		in.CtimeNs = now
		out = in
		return putInode(b, in)
	})
	return out, err
}

// Written is the end of the bytes ever written to file in (its written
// mark), past which it has no chunks; a file from before the mark was kept
// counts its length instead.
func Written(in *metapb.Inode) uint64 {
	if in.Written != nil {
		return *in.Written
	}
	return in.Size
}

// raiseWritten raises in's written mark to end.
func raiseWritten(in *metapb.Inode, end uint64) {
	w := max(Written(in), end)
	in.Written = &w
}

// Usage is what Statfs counts.
type Usage struct {
	Inodes, Files uint64
	Bytes         uint64 // the files' lengths, added up
	// InlineFiles are the files whose bytes the namespace keeps, and
	// InlineBytes those bytes.
	InlineFiles, InlineBytes uint64
}

// Statfs counts the namespace's inodes, files and file bytes.
func (ns *Namespace) Statfs() (Usage, error) {
	var u Usage
	it, err := ns.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'i'}, UpperBound: []byte{'j'}})
	if err != nil {
		return u, err
	}
	defer it.Close()
	in := &metapb.Inode{}
	for it.First(); it.Valid(); it.Next() {
		u.Inodes++
		if err := proto.Unmarshal(it.Value(), in); err != nil {
			return u, fmt.Errorf("statfs: inode record %x: %w", it.Key(), err)
		}
		if in.Type == metapb.InodeType_FILE {
			u.Files++
			u.Bytes += in.Size
			if in.Inline > 0 {
				u.InlineFiles++
				u.InlineBytes += uint64(in.Inline)
			}
		}
	}
	return u, it.Error()
}

// Garbage returns up to limit files whose last link went, for the chunk
// collector, which calls Collected once their chunks are gone.
func (ns *Namespace) Garbage(limit int) ([]*metapb.Inode, error) { return ns.GarbageAfter(0, limit) }

// GarbageAfter is Garbage from the inode after `after` on, to page through.
func (ns *Namespace) GarbageAfter(after uint64, limit int) ([]*metapb.Inode, error) {
	it, err := ns.db.NewIter(&pebble.IterOptions{LowerBound: gcKey(after + 1), UpperBound: []byte{'h'}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*metapb.Inode
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		in := &metapb.Inode{}
		if err := proto.Unmarshal(it.Value(), in); err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, it.Error()
}

// Collected forgets a collected file.
func (ns *Namespace) Collected(ino uint64) error {
	return ns.write(func(b *pebble.Batch) error {
		// A file made with no name (CreateTemp) and never linked still has
		// its inode record: it goes too.
		if in, err := loadInode(batchReader{b}, ino); err == nil && in.Nlink == 0 {
			if err := b.Delete(inodeKey(ino), nil); err != nil {
				return err
			}
			if err := dropXattrs(b, ino); err != nil {
				return err
			}
			if err := b.Delete(contentKey(ino), nil); err != nil {
				return err
			}
		}
		return b.Delete(gcKey(ino), nil)
	})
}
