package fuse

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// Config tunes a mount. Zero fields take the defaults in brackets.
type Config struct {
	// AttrTimeout and EntryTimeout are how long the kernel may cache an
	// inode's attributes and a name's lookup (1s): short, since other
	// clients change the namespace too.
	AttrTimeout, EntryTimeout time.Duration
	// NegativeTimeout is how long the kernel may cache that a name does
	// not exist (0: not at all). Longer saves the round trip of a
	// repeated probe for a missing name (a PATH search, Python's imports)
	// but hides a name made by another client for that long; names made
	// through this mount show at once either way.
	NegativeTimeout time.Duration
	// OpTimeout bounds each request to the cluster (60s); past it the
	// caller gets ETIMEDOUT (sdk.Errno).
	OpTimeout time.Duration
	// Readahead is how far a sequential reader is read ahead (16 MiB), in
	// four windows, each fetched by one batched read.
	Readahead int
	// KernelReadahead is the kernel's own readahead for the mount (8 MiB;
	// settable as root only): it decides how many of a sequential reader's
	// requests are in flight at once.
	KernelReadahead int
	// WriteBehind is how many bytes written to the mount may still be
	// on their way to storage (64 MiB): write(2) returns once the mount
	// holds the bytes, and close, fsync and reads wait for them
	// (writeback.go). Negative: every write waits for its chain.
	WriteBehind int64
	// Cache is how many bytes of the files open in this mount it keeps
	// for readers that come back to them, O_DIRECT ones too (1 GiB,
	// mapped once a reader first comes back; cache.go). Negative: none.
	Cache int64
	// AllowOther lets users other than the mounting one in (permission
	// checks still apply).
	AllowOther bool
	Logger     *slog.Logger
}

func (c *Config) defaults() {
	if c.AttrTimeout <= 0 {
		c.AttrTimeout = time.Second
	}
	if c.EntryTimeout <= 0 {
		c.EntryTimeout = time.Second
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = time.Minute
	}
	if c.Readahead <= 0 {
		c.Readahead = 16 << 20
	}
	if c.KernelReadahead <= 0 {
		c.KernelReadahead = 8 << 20
	}
	if c.Cache == 0 {
		c.Cache = 1 << 30
	}
	if c.WriteBehind == 0 {
		c.WriteBehind = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// FS is the file system the kernel talks to: a gofuse.RawFileSystem over
// an SDK client.
type FS struct {
	gofuse.RawFileSystem // ENOSYS for what Sluice does not do (locks, ...)

	c   *sdk.Client
	cfg Config
	log *slog.Logger

	stats  Stats
	behind *budget     // write-behind's bytes, nil when writes go through
	cache  *blockCache // nil: none
	pages  pages       // whether the kernel keeps a file's pages at open

	mu     sync.Mutex
	open   map[uint64]*openFile // by inode
	fhs    map[uint64]*handle   // by file handle
	dirs   map[uint64]*dirHandle
	nextFh uint64

	noCaps capCache
	names  *names
}

var _ gofuse.RawFileSystem = (*FS)(nil)

// NewFS serves client c's cluster.
func NewFS(c *sdk.Client, cfg Config) *FS {
	cfg.defaults()
	fs := &FS{RawFileSystem: gofuse.NewDefaultRawFileSystem(), c: c, cfg: cfg, log: cfg.Logger,
		open: map[uint64]*openFile{}, fhs: map[uint64]*handle{}, dirs: map[uint64]*dirHandle{},
		names: newNames(cfg.EntryTimeout, cfg.AttrTimeout)}
	if cfg.WriteBehind > 0 {
		fs.behind = newBudget(cfg.WriteBehind)
	}
	fs.cache = newBlockCache(c, cfg.Cache, &fs.stats)
	return fs
}

func (fs *FS) String() string { return "sluice" }

// Stats counts what the mount's readahead and caches did, since it began.
type Stats struct {
	Windows        atomic.Int64 // windows fetched, each in one batched read
	ReadaheadBytes atomic.Int64 // bytes the kernel got out of windows
	// CapsRemembered counts the kernel's reads of security.capability
	// (one before every write) answered from memory (xattr.go).
	CapsRemembered atomic.Int64
	// NamesRemembered counts lookups answered from directories listed in
	// bulk (names.go); Listings the listings taken for them.
	NamesRemembered, Listings atomic.Int64
	// AttrsRemembered counts directories' GETATTRs answered from memory
	// (names.dirAttr).
	AttrsRemembered atomic.Int64
	// CacheFetches counts blocks the block cache fetched (cache.go),
	// CacheHits the reads it answered from memory.
	CacheFetches, CacheHits atomic.Int64
}

// Stats is the mount's counters.
func (fs *FS) Stats() *Stats { return &fs.stats }

// op is the context of one request: the configured deadline.
func (fs *FS) op() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), fs.cfg.OpTimeout)
}

func owner(h *gofuse.InHeader, mode uint32) sdk.Owner {
	return sdk.Owner{Mode: mode & 0o7777, UID: h.Uid, GID: h.Gid}
}

// fillAttr converts an inode; a file open in this mount has the length
// its writers have reached, which the namespace learns at flush.
func (fs *FS) fillAttr(in *sdk.FileInfo, a *gofuse.Attr) {
	size := uint64(in.Size())
	if in.Mode().IsRegular() {
		if of := fs.opened(in.Ino()); of != nil {
			size = max(size, uint64(of.size()))
		}
	}
	*a = gofuse.Attr{Ino: in.Ino(), Size: size, Blocks: (size + 511) / 512, Mode: in.UnixMode(),
		Nlink: in.Nlink(), Owner: gofuse.Owner{Uid: in.UID(), Gid: in.GID()}, Rdev: in.Rdev(), Blksize: 1 << 20}
	a.Atime, a.Atimensec = unixTime(in.AccessTime())
	a.Mtime, a.Mtimensec = unixTime(in.ModTime())
	a.Ctime, a.Ctimensec = unixTime(in.ChangeTime())
}

func unixTime(t time.Time) (uint64, uint32) { return uint64(t.Unix()), uint32(t.Nanosecond()) }

func (fs *FS) fillEntry(in *sdk.FileInfo, out *gofuse.EntryOut) {
	out.NodeId, out.Generation = in.Ino(), 0 // inode numbers are never reused
	out.SetEntryTimeout(fs.cfg.EntryTimeout)
	out.SetAttrTimeout(fs.cfg.AttrTimeout)
	fs.fillAttr(in, &out.Attr)
}

// entry answers a request that makes or finds an inode.
func (fs *FS) entry(op string, ino uint64, in *sdk.FileInfo, err error, out *gofuse.EntryOut) gofuse.Status {
	if err != nil {
		return fs.errno(op, ino, err)
	}
	fs.fillEntry(in, out)
	return gofuse.OK
}

// Lookup answers from the names listed in bulk when it can (names.go),
// else asks the cluster, and lists the directory once its lookups have
// missed often enough.
func (fs *FS) Lookup(cancel <-chan struct{}, h *gofuse.InHeader, name string, out *gofuse.EntryOut) gofuse.Status {
	now := time.Now()
	if in, entryLeft, attrLeft := fs.names.lookup(h.NodeId, name, now); in != nil {
		fs.fillEntry(in, out)
		out.SetEntryTimeout(entryLeft)
		out.SetAttrTimeout(attrLeft)
		fs.stats.NamesRemembered.Add(1)
		return gofuse.OK
	}
	ctx, done := fs.op()
	defer done()
	in, err := fs.c.StatAt(ctx, h.NodeId, name)
	if errors.Is(err, sdk.ErrNotExist) && fs.cfg.NegativeTimeout > 0 {
		*out = gofuse.EntryOut{} // node id 0: the kernel keeps the absence
		out.SetEntryTimeout(fs.cfg.NegativeTimeout)
		return gofuse.OK
	}
	if err == nil {
		if list, gen := fs.names.missed(h.NodeId, now); list {
			fs.stats.Listings.Add(1)
			ents, whole, err := fs.listDir(ctx, h.NodeId, nil, maxListed)
			if err != nil {
				fs.log.Debug("listing a directory for its lookups failed", "inode", h.NodeId, "err", err)
			}
			if !whole {
				ents = nil
			}
			fs.names.listed(h.NodeId, gen, now, ents)
		}
	}
	return fs.entry("lookup", h.NodeId, in, err, out)
}

// made answers a request that made name in dir and remembers the name.
func (fs *FS) made(op string, dir uint64, name string, in *sdk.FileInfo, err error, out *gofuse.EntryOut) gofuse.Status {
	if err == nil {
		fs.names.made(dir, name, in, time.Now(), op != "link") // a link stamps the inode it links, not a new one
	}
	return fs.entry(op, dir, in, err, out)
}

// Forget: node ids are inode numbers, so the mount keeps nothing per
// lookup to forget; the kernel let the inode go, and its pages with it.
func (fs *FS) Forget(nodeid, nlookup uint64) { fs.pages.forget(nodeid) }

// stat is an inode's attributes; a file unlinked while open here keeps
// the ones it had, and unlinked says so (its link count is then 0).
func (fs *FS) stat(ctx context.Context, ino uint64) (in *sdk.FileInfo, unlinked bool, err error) {
	in, err = fs.c.StatAt(ctx, ino, "")
	if errors.Is(err, sdk.ErrNotExist) {
		if of := fs.opened(ino); of != nil {
			return of.inode(), true, nil
		}
	}
	return in, false, err
}

func (fs *FS) GetAttr(cancel <-chan struct{}, in *gofuse.GetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	now := time.Now()
	if a, left, ok := fs.names.dirAttr(in.NodeId, now); ok {
		out.Attr = a
		out.SetTimeout(left)
		fs.stats.AttrsRemembered.Add(1)
		return gofuse.OK
	}
	gen := fs.names.generation()
	ctx, done := fs.op()
	defer done()
	ino, unlinked, err := fs.stat(ctx, in.NodeId)
	if err != nil {
		return fs.errno("getattr", in.NodeId, err)
	}
	out.SetTimeout(fs.cfg.AttrTimeout)
	fs.fillAttr(ino, &out.Attr)
	if unlinked {
		out.Attr.Nlink = 0
	}
	if ino.IsDir() {
		fs.names.keepDirAttr(in.NodeId, out.Attr, gen, now)
	}
	return gofuse.OK
}

func (fs *FS) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	var s sdk.SetAttr
	if m, ok := in.GetMode(); ok {
		s.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		s.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		s.GID = &g
	}
	if t, ok := in.GetATime(); ok {
		s.Atime = &t
	}
	if t, ok := in.GetMTime(); ok {
		s.Mtime = &t
	}
	if size, ok := in.GetSize(); ok {
		// A file open here truncates through its shared handle, so the
		// handle's idea of the length follows.
		if of := fs.opened(in.NodeId); of != nil {
			if err := of.truncate(ctx, int64(size)); err != nil {
				return fs.errno("truncate", in.NodeId, err)
			}
		} else {
			s.Size = &size
		}
	}
	ino, err := fs.c.SetattrAt(ctx, in.NodeId, "", s)
	fs.names.touched(in.NodeId)
	if err != nil {
		return fs.errno("setattr", in.NodeId, err)
	}
	out.SetTimeout(fs.cfg.AttrTimeout)
	fs.fillAttr(ino, &out.Attr)
	return gofuse.OK
}

func (fs *FS) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, err := fs.c.MkdirAt(ctx, in.NodeId, name, owner(&in.InHeader, in.Mode))
	return fs.made("mkdir", in.NodeId, name, ino, err, out)
}

// Mknod makes regular files, fifos, device nodes and socket files (bind(2)
// on a unix socket makes one); the kernel gives the special ones their
// behaviour.
func (fs *FS) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, err := fs.c.MknodAt(ctx, in.NodeId, name, in.Mode, in.Rdev, owner(&in.InHeader, in.Mode))
	return fs.made("mknod", in.NodeId, name, ino, err, out)
}

func (fs *FS) Unlink(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	err := fs.c.UnlinkAt(ctx, h.NodeId, name)
	fs.names.removed(h.NodeId, name, time.Now()) // also when it failed: it may have been done
	return fs.errno("unlink", h.NodeId, err)
}

func (fs *FS) Rmdir(cancel <-chan struct{}, h *gofuse.InHeader, name string) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	err := fs.c.RmdirAt(ctx, h.NodeId, name)
	fs.names.removed(h.NodeId, name, time.Now())
	return fs.errno("rmdir", h.NodeId, err)
}

// renameNoReplace is renameat2's RENAME_NOREPLACE.
const renameNoReplace = 1

func (fs *FS) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	var err error
	switch in.Flags {
	case 0:
		err = fs.c.RenameAt(ctx, in.NodeId, oldName, in.Newdir, newName)
	case renameNoReplace:
		err = fs.c.RenameNoReplaceAt(ctx, in.NodeId, oldName, in.Newdir, newName)
	default:
		return gofuse.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported
	}
	now := time.Now()
	fs.names.removed(in.NodeId, oldName, now)
	fs.names.removed(in.Newdir, newName, now)
	return fs.errno("rename", in.NodeId, err)
}

func (fs *FS) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, err := fs.c.LinkAt(ctx, in.Oldnodeid, "", in.NodeId, name)
	fs.names.touched(in.Oldnodeid)
	return fs.made("link", in.NodeId, name, ino, err, out)
}

func (fs *FS) Symlink(cancel <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, err := fs.c.SymlinkAt(ctx, h.NodeId, name, target, owner(h, 0o777))
	return fs.made("symlink", h.NodeId, name, ino, err, out)
}

func (fs *FS) Readlink(cancel <-chan struct{}, h *gofuse.InHeader) ([]byte, gofuse.Status) {
	ctx, done := fs.op()
	defer done()
	in, err := fs.c.StatAt(ctx, h.NodeId, "")
	if err != nil {
		return nil, fs.errno("readlink", h.NodeId, err)
	}
	if in.UnixMode()&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, gofuse.EINVAL
	}
	return []byte(in.Target()), gofuse.OK
}

// Access checks mask against the inode's mode the way a local file system
// does (with default_permissions the kernel mostly checks for itself).
func (fs *FS) Access(cancel <-chan struct{}, in *gofuse.AccessIn) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, _, err := fs.stat(ctx, in.NodeId)
	if err != nil {
		return fs.errno("access", in.NodeId, err)
	}
	if !permitted(ino, in.Uid, in.Gid, in.Mask&7) {
		return gofuse.EACCES
	}
	return gofuse.OK
}

// permitted reports whether uid (in group gid) may do want (r=4, w=2,
// x=1) to in. Root may do anything but execute a file no one may execute.
func permitted(in *sdk.FileInfo, uid, gid, want uint32) bool {
	mode := in.UnixMode()
	if uid == 0 {
		return want&1 == 0 || in.IsDir() || mode&0o111 != 0
	}
	bits := mode & 7
	switch {
	case uid == in.UID():
		bits = mode >> 6 & 7
	case gid == in.GID():
		bits = mode >> 3 & 7
	}
	return want&^bits == 0
}

func (fs *FS) StatFs(cancel <-chan struct{}, h *gofuse.InHeader, out *gofuse.StatfsOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	u, err := fs.c.Statfs(ctx)
	if err != nil {
		return fs.errno("statfs", h.NodeId, err)
	}
	// Sizes are the storage targets' disks over the replica count, as
	// their heartbeats last reported them (sdk.Usage).
	const bsize = 4096
	total := max(u.Capacity/bsize, (u.Bytes+bsize-1)/bsize)
	free := min(u.Free/bsize, total)
	*out = gofuse.StatfsOut{Blocks: total, Bfree: free, Bavail: free,
		Files: u.Inodes + 1<<32, Ffree: 1 << 32, Bsize: bsize, Frsize: bsize, NameLen: 255}
	return gofuse.OK
}
