package fuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// openFile is one inode open in this mount: one SDK file shared by all the
// kernel's handles on it, so that they agree on the file's length, and the
// readahead windows of its sequential reader.
type openFile struct {
	ino  uint64
	refs int // under FS.mu

	mu     sync.RWMutex // writers: swapping f; readers: using it
	f      *sdk.File
	writer bool        // f is open for writing
	dirty  atomic.Bool // written since the length was last published

	ra *readahead
	wb *writeBehind                                 // nil unless f is open for writing and the mount writes behind
	op func() (context.Context, context.CancelFunc) // a request's context
}

// handle is one of the kernel's file handles.
type handle struct {
	of    *openFile
	write bool
}

// opened returns inode ino's open file, if this mount has it open (and
// not just being opened).
func (fs *FS) opened(ino uint64) *openFile {
	fs.mu.Lock()
	of := fs.open[ino]
	fs.mu.Unlock()
	if of == nil {
		return nil
	}
	of.mu.RLock()
	defer of.mu.RUnlock()
	if of.f == nil {
		return nil
	}
	return of
}

// size is the length the mount's writers have reached, bytes written
// behind included.
func (of *openFile) size() int64 {
	of.mu.RLock()
	defer of.mu.RUnlock()
	if of.wb != nil {
		return max(of.f.Size(), of.wb.size())
	}
	return of.f.Size()
}

// inode is the file's inode as of opening, with the length the mount's
// writers have reached.
func (of *openFile) inode() *sdk.FileInfo {
	of.mu.RLock()
	defer of.mu.RUnlock()
	return of.f.Inode()
}

// acquire opens inode ino in this mount (again), for writing too when
// write is set, and returns a new handle number; keep reports
// that the kernel may keep the file's pages (pages.go).
func (fs *FS) acquire(ctx context.Context, ino uint64, write bool) (fh uint64, of *openFile, keep bool, err error) {
	fs.mu.Lock()
	of = fs.open[ino]
	if of == nil {
		of = &openFile{ino: ino}
		fs.open[ino] = of
	}
	of.refs++
	fs.mu.Unlock()
	if keep, err = of.ensure(ctx, fs, write); err != nil {
		fs.drop(of)
		return 0, nil, false, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nextFh++
	fs.fhs[fs.nextFh] = &handle{of: of, write: write}
	return fs.nextFh, of, keep, nil
}

// ensure opens the SDK file, or reopens it for writing when a writer comes
// to a file open only for reading; keep when it found the file as this
// mount's previous open did.
func (of *openFile) ensure(ctx context.Context, fs *FS, write bool) (keep bool, err error) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.f != nil && (!write || of.writer) {
		of.ra.invalidate() // close-to-open
		// The file is open here already (often a close's release still
		// on its way): its state now says whether the pages may stay.
		in, err := fs.c.StatAt(ctx, of.ino, "")
		return err == nil && fs.pages.opened(in), nil
	}
	f, err := fs.c.OpenAt(ctx, of.ino, "", write)
	if err != nil {
		return false, err
	}
	keep = fs.pages.opened(f.Inode())
	if old := of.f; old != nil { // open for reading only: nothing to publish
		of.ra.close()
		old.Close()
		keep = false // it was open here, and may have changed since
	}
	of.set(fs, f, write)
	return keep, nil
}

// set makes f, open for writing if write, the open file's SDK file.
func (of *openFile) set(fs *FS, f *sdk.File, write bool) {
	of.f, of.writer, of.op = f, write, fs.op
	of.ra = newReadahead(fs.c, f, fs.cfg.Readahead, fs.cache, &fs.stats)
	if write && fs.behind != nil {
		of.wb = newWriteBehind(fs.behind, f.Inode().ChunkSize(), of.ra.invalidate)
	}
}

// adopt makes f, a file just made and opened for writing, open in this
// mount, and returns a new handle on it.
func (fs *FS) adopt(f *sdk.File) uint64 {
	of := &openFile{ino: f.Inode().Ino(), refs: 1}
	of.set(fs, f, true)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.open[of.ino] = of
	fs.nextFh++
	fs.fhs[fs.nextFh] = &handle{of: of, write: true}
	return fs.nextFh
}

// drop releases one reference to of; the last one closes the SDK file,
// which publishes the length and ends the write session.
func (fs *FS) drop(of *openFile) error {
	fs.mu.Lock()
	of.refs--
	last := of.refs == 0
	if last {
		delete(fs.open, of.ino)
	}
	fs.mu.Unlock()
	if !last {
		return nil
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.f == nil {
		return nil
	}
	of.ra.close()
	return errors.Join(of.settle(), of.f.Close())
}

func (fs *FS) handle(fh uint64) *handle {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.fhs[fh]
}

const accMode = syscall.O_ACCMODE

func (fs *FS) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	write := in.Flags&accMode != syscall.O_RDONLY
	fh, of, keep, err := fs.acquire(ctx, in.NodeId, write)
	if err != nil {
		return fs.errno("open", in.NodeId, err)
	}
	if keep && in.Flags&syscall.O_TRUNC == 0 {
		out.OpenFlags |= gofuse.FOPEN_KEEP_CACHE
	}
	if in.Flags&syscall.O_TRUNC != 0 && write {
		err := of.truncate(ctx, 0)
		fs.names.touched(in.NodeId)
		if err != nil {
			fs.Release(cancel, &gofuse.ReleaseIn{InHeader: in.InHeader, Fh: fh})
			return fs.errno("open", in.NodeId, err)
		}
	}
	out.Fh = fh
	return gofuse.OK
}

// Create makes and opens a file. Opened for writing, a new file costs one
// write to the metadata log (sdk.Client.CreateOpenAt); one that exists
// (without O_EXCL) is opened as Open does.
func (fs *FS) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	o := owner(&in.InHeader, in.Mode)
	var ino *sdk.FileInfo
	var err error
	if in.Flags&accMode != syscall.O_RDONLY {
		var f *sdk.File
		if f, err = fs.c.CreateOpenAt(ctx, in.NodeId, name, o); err == nil {
			fs.names.made(in.NodeId, name, f.Inode(), time.Now(), true)
			fs.noCaps.add(f.Inode().Ino(), fs.cfg.AttrTimeout) // a new file has no attributes
			out.Fh = fs.adopt(f)
			fs.fillEntry(f.Inode(), &out.EntryOut)
			return gofuse.OK
		}
	} else if ino, err = fs.c.CreateAt(ctx, in.NodeId, name, o); err == nil {
		fs.names.made(in.NodeId, name, ino, time.Now(), true)
	}
	if errors.Is(err, sdk.ErrExist) && in.Flags&syscall.O_EXCL == 0 {
		ino, err = fs.c.StatAt(ctx, in.NodeId, name) // made by someone else meanwhile: open it
	}
	if err != nil {
		return fs.errno("create", in.NodeId, err)
	}
	return fs.openMade(cancel, in, ino, out)
}

// openMade opens the file Create or Tmpfile made, and answers with it.
func (fs *FS) openMade(cancel <-chan struct{}, in *gofuse.CreateIn, ino *sdk.FileInfo, out *gofuse.CreateOut) gofuse.Status {
	open := gofuse.OpenIn{InHeader: in.InHeader, Flags: in.Flags}
	open.NodeId = ino.Ino()
	if st := fs.Open(cancel, &open, &out.OpenOut); !st.Ok() {
		return st
	}
	fs.fillEntry(ino, &out.EntryOut)
	return gofuse.OK
}

// Tmpfile is open(2) with O_TMPFILE: a file with no name in directory
// in.NodeId, opened; linkat(2) gives it one.
func (fs *FS) Tmpfile(cancel <-chan struct{}, in *gofuse.CreateIn, out *gofuse.CreateOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	ino, err := fs.c.CreateTempAt(ctx, in.NodeId, "", owner(&in.InHeader, in.Mode))
	if err != nil {
		return fs.errno("tmpfile", in.NodeId, err)
	}
	return fs.openMade(cancel, in, ino, out)
}

func (fs *FS) Read(cancel <-chan struct{}, in *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	h := fs.handle(in.Fh)
	if h == nil {
		return nil, gofuse.EBADF
	}
	ctx, done := fs.op()
	defer done()
	r, err := h.of.reply(ctx, buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	if err != nil {
		return nil, fs.errno("read", in.NodeId, err)
	}
	if r.Size() == 0 {
		r.Done() // go-fuse writes an empty reply without it
		return gofuse.ReadResultData(nil), gofuse.OK
	}
	return r, gofuse.OK
}

func (fs *FS) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	h := fs.handle(in.Fh)
	if h == nil || !h.write {
		return 0, gofuse.EBADF
	}
	n, err := h.of.write(data, int64(in.Offset))
	fs.names.touched(in.NodeId)
	if err != nil {
		return uint32(n), fs.errno("write", in.NodeId, err)
	}
	return uint32(n), gofuse.OK
}

// Flush comes with every close(2): the length written so far becomes
// visible to every client, as after close on a local file system.
// Flush publishes the length, and drops the POSIX locks of the closing
// owner on the file, as close(2) does.
func (fs *FS) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	if st := fs.sync("flush", in.NodeId, in.Fh); !st.Ok() {
		return st
	}
	ctx, done := fs.op()
	defer done()
	return fs.status("flush", in.NodeId, fs.c.ReleaseLocksAt(ctx, in.NodeId, in.LockOwner, false))
}

func (fs *FS) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) gofuse.Status {
	return fs.sync("fsync", in.NodeId, in.Fh)
}

func (fs *FS) sync(op string, ino, fh uint64) gofuse.Status {
	h := fs.handle(fh)
	if h == nil {
		return gofuse.EBADF
	}
	ctx, done := fs.op()
	defer done()
	err := h.of.sync(ctx)
	fs.names.touched(ino) // the length it published
	return fs.errno(op, ino, err)
}

func (fs *FS) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	fs.mu.Lock()
	h := fs.fhs[in.Fh]
	delete(fs.fhs, in.Fh)
	fs.mu.Unlock()
	if h == nil {
		return
	}
	if in.ReleaseFlags&releaseFlockUnlock != 0 { // the last close of a file that held a flock
		ctx, done := fs.op()
		if err := fs.c.ReleaseLocksAt(ctx, in.NodeId, in.LockOwner, true); err != nil {
			fs.errno("release", in.NodeId, err)
		}
		done()
	}
	// The last close publishes what was written since the last flush;
	// with nothing (a flush published it all), names stay as they are.
	written := h.of.dirty.Load()
	err := fs.drop(h.of)
	if written {
		fs.names.touched(in.NodeId)
	}
	if err != nil {
		fs.errno("release", in.NodeId, err)
	}
}

// releaseFlockUnlock is FUSE_RELEASE_FLOCK_UNLOCK: release the flocks of
// the file's lock owner.
const releaseFlockUnlock = 1 << 1

// settle waits for the bytes written behind (of.mu held, either way).
func (of *openFile) settle() error {
	if of.wb == nil || of.wb.idle() {
		return nil
	}
	if err := of.wb.barrier(of.f, of.op); err != nil {
		return fmt.Errorf("inode %d: %w", of.ino, err)
	}
	return nil
}

// reply answers a read of p at off (readahead.reply): empty past the end.
func (of *openFile) reply(ctx context.Context, p []byte, off int64) (*reply, error) {
	of.mu.RLock()
	defer of.mu.RUnlock()
	if err := of.settle(); err != nil {
		return nil, err
	}
	r, err := of.ra.reply(ctx, p, off)
	if errors.Is(err, io.EOF) {
		return r, nil
	}
	return r, err
}

// write writes p at off. The readahead's windows are made stale when the
// bytes are taken and again once they are on storage (here, or when the
// write behind lands): a window the kernel's readahead had fetched in
// between, with the old bytes, is never served. The same holds for
// truncate and allocate.
func (of *openFile) write(p []byte, off int64) (int, error) {
	of.mu.RLock()
	defer of.mu.RUnlock()
	of.ra.invalidate()
	of.dirty.Store(true)
	if of.wb != nil {
		return of.wb.write(of.f, of.op, p, off)
	}
	defer of.ra.invalidate()
	return of.f.WriteAt(p, off)
}

func (of *openFile) truncate(ctx context.Context, size int64) error {
	of.mu.RLock()
	defer of.mu.RUnlock()
	of.ra.invalidate()
	defer of.ra.invalidate()
	if err := of.settle(); err != nil {
		return err
	}
	if of.wb != nil {
		of.wb.truncated(size)
	}
	return of.f.Truncate(ctx, size)
}

func (of *openFile) allocate(ctx context.Context, off, n int64, mode uint32) error {
	of.mu.RLock()
	defer of.mu.RUnlock()
	of.ra.invalidate()
	defer of.ra.invalidate()
	if err := of.settle(); err != nil {
		return err
	}
	if mode == punchHole|keepSize {
		return of.f.PunchHole(ctx, off, n)
	}
	return of.f.Allocate(ctx, off, n, mode&keepSize != 0)
}

// fallocate(2)'s modes the mount takes.
const (
	keepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	punchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
)

// Fallocate takes the default mode (extend the length),
// FALLOC_FL_KEEP_SIZE (nothing to do: chunks are allocated as they are
// written) and FALLOC_FL_PUNCH_HOLE with it (sdk.File.PunchHole); the
// other modes are EOPNOTSUPP.
func (fs *FS) Fallocate(cancel <-chan struct{}, in *gofuse.FallocateIn) gofuse.Status {
	if in.Mode != 0 && in.Mode != keepSize && in.Mode != punchHole|keepSize {
		return gofuse.Status(syscall.EOPNOTSUPP)
	}
	h := fs.handle(in.Fh)
	if h == nil {
		return gofuse.EBADF
	}
	if in.Offset > math.MaxInt64 || in.Length > math.MaxInt64 {
		return gofuse.Status(syscall.EFBIG)
	}
	ctx, done := fs.op()
	defer done()
	err := h.of.allocate(ctx, int64(in.Offset), int64(in.Length), in.Mode)
	fs.names.touched(in.NodeId)
	return fs.status("fallocate", in.NodeId, err)
}

func (of *openFile) sync(ctx context.Context) error {
	if !of.dirty.Swap(false) {
		return nil
	}
	of.mu.RLock()
	defer of.mu.RUnlock()
	if err := of.settle(); err != nil {
		of.dirty.Store(true)
		return err
	}
	if err := of.f.Sync(ctx); err != nil {
		of.dirty.Store(true)
		return fmt.Errorf("publish the length of inode %d: %w", of.ino, err)
	}
	return nil
}

// OnUnmount closes what the kernel left open (a lazy unmount ends only
// when the last file closes, but a forced one does not wait): the SDK
// files publish their lengths and the readahead fetches stop.
func (fs *FS) OnUnmount() {
	fs.mu.Lock()
	open := fs.open
	fs.open, fs.fhs, fs.dirs = map[uint64]*openFile{}, map[uint64]*handle{}, map[uint64]*dirHandle{}
	fs.mu.Unlock()
	for ino, of := range open {
		of.mu.Lock()
		if of.f != nil {
			of.ra.close()
			if err := errors.Join(of.settle(), of.f.Close()); err != nil {
				fs.log.Warn("fuse: closing a file left open at unmount", "ino", ino, "err", err)
			}
		}
		of.mu.Unlock()
	}
}
