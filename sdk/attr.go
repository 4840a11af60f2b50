package sdk

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/metapb"
)

// SetAttr says which attributes Setattr changes; nil ones stay.
type SetAttr struct {
	Mode, UID, GID *uint32
	Size           *uint64 // truncate or extend (files)
	Atime, Mtime   *time.Time
}

// SetattrAt changes the attributes of (at, p) that s sets. A new size goes
// through File.Truncate, so storage drops what lies past it.
func (c *Client) SetattrAt(ctx context.Context, at uint64, p string, s SetAttr) (*FileInfo, error) {
	if err := checkPath("setattr", at, p); err != nil {
		return nil, err
	}
	if s.Size != nil {
		f, err := c.OpenAt(ctx, at, p, false)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := f.Truncate(ctx, int64(*s.Size)); err != nil {
			return nil, err
		}
		at, p, s.Size = f.in.Ino, "", nil
		if s == (SetAttr{}) { // nothing else to change
			return c.StatAt(ctx, at, p)
		}
	}
	req := &metapb.SetattrRequest{At: at, Path: p, Mode: s.Mode, Uid: s.UID, Gid: s.GID, Client: c.id, Seq: c.next()}
	if s.Atime != nil {
		t := s.Atime.UnixNano()
		req.AtimeNs = &t
	}
	if s.Mtime != nil {
		t := s.Mtime.UnixNano()
		req.MtimeNs = &t
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Setattr(cctx, req)
	return info("setattr", at, p, in, err)
}

// Truncate sets the length of file p.
func (c *Client) Truncate(ctx context.Context, p string, size int64) error {
	if size < 0 {
		return fmt.Errorf("truncate %s: negative length: %w", p, ErrInvalid)
	}
	n := uint64(size)
	_, err := c.SetattrAt(ctx, 0, p, SetAttr{Size: &n})
	return err
}

// Chmod sets p's permission bits (and setuid, setgid, sticky).
func (c *Client) Chmod(ctx context.Context, p string, mode uint32) error {
	_, err := c.SetattrAt(ctx, 0, p, SetAttr{Mode: &mode})
	return err
}

// Chown sets p's owner and group.
func (c *Client) Chown(ctx context.Context, p string, uid, gid uint32) error {
	_, err := c.SetattrAt(ctx, 0, p, SetAttr{UID: &uid, GID: &gid})
	return err
}

// Utimes sets p's access and modification times.
func (c *Client) Utimes(ctx context.Context, p string, atime, mtime time.Time) error {
	_, err := c.SetattrAt(ctx, 0, p, SetAttr{Atime: &atime, Mtime: &mtime})
	return err
}

// Link makes newP another name of file p.
func (c *Client) Link(ctx context.Context, p, newP string) error {
	_, err := c.LinkAt(ctx, 0, p, 0, newP)
	return err
}

// Readlink returns the target of symbolic link p.
func (c *Client) Readlink(ctx context.Context, p string) (string, error) {
	if err := checkPath("readlink", 0, p); err != nil {
		return "", err
	}
	in, err := c.Stat(ctx, p)
	if err != nil {
		return "", err
	}
	if in.Mode().Type() != fs.ModeSymlink {
		return "", fmt.Errorf("readlink %s: not a symbolic link: %w", p, ErrInvalid)
	}
	return in.Target(), nil
}

// Usage is what the namespace holds and what storage can hold.
type Usage struct {
	Inodes uint64 `json:"inodes"`
	Files  uint64 `json:"files"`
	Bytes  uint64 `json:"bytes"` // the files' lengths, added up
	// Capacity and Free are the storage targets' disks divided by the
	// replica count: what files can hold, and what more they can. Zero
	// when no target has reported yet; Targets is how many have.
	Capacity uint64 `json:"capacity_bytes"`
	Free     uint64 `json:"free_bytes"`
	Targets  int    `json:"targets_reporting"`
	// TargetSpace is each reporting target's own disk (not divided by
	// replicas), by target id.
	TargetSpace []TargetSpace `json:"-"`
	// InlineFiles are the files whose bytes the metadata service keeps
	// (small files), InlineBytes those bytes (part of Bytes).
	InlineFiles uint64 `json:"inline_files"`
	InlineBytes uint64 `json:"inline_bytes"`
}

// Statfs counts the namespace's inodes, files and bytes.
func (c *Client) Statfs(ctx context.Context) (Usage, error) {
	cctx, done := c.call(ctx)
	defer done()
	r, err := c.meta.Statfs(cctx, &metapb.StatfsRequest{})
	if err != nil {
		return Usage{}, fsErr("statfs", "/", err)
	}
	u := Usage{Inodes: r.Inodes, Files: r.Files, Bytes: r.Bytes,
		Capacity: r.CapacityBytes, Free: r.FreeBytes, Targets: int(r.TargetsReporting), InlineFiles: r.InlineFiles, InlineBytes: r.InlineBytes}
	for _, sp := range r.TargetSpace {
		u.TargetSpace = append(u.TargetSpace, TargetSpace{Target: sp.Target, TotalBytes: sp.TotalBytes, FreeBytes: sp.FreeBytes})
	}
	return u, nil
}

// Inode is the file's inode as of opening, with the length this handle
// knows (Size) and the name it was opened by.
func (f *File) Inode() *FileInfo {
	return newFileInfo(path.Base(f.name), f.in).withSize(f.Size())
}

// Sync makes the length written through this handle visible to every
// client, keeping the handle open (fsync). The bytes themselves are on
// storage, replicated, once WriteAt returns, except a small file's, which
// Sync (or Close) hands to the metadata service with the length
// (inline.go). With nothing written since the last Sync it sends nothing.
func (f *File) Sync(ctx context.Context) error {
	if f.session == 0 {
		return nil
	}
	return f.c.closeSession(ctx, f, true)
}

// Truncate sets the file's length. Shrinking removes the chunks wholly
// past the new end from storage and overwrites the rest of the chunk the
// end falls in with zeros, so that a later extension reads zeros there, as
// POSIX wants; then the namespace records the length. Only chunks below
// the file's written mark (and what this handle wrote) can hold bytes, so
// only those are touched, however long the file was. A length past
// fsmeta.MaxFileSize is refused with ErrTooLarge (EFBIG). It works on any
// handle (permission is the caller's business, as for ftruncate).
func (f *File) Truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("truncate %s: negative length: %w", f.name, ErrInvalid)
	}
	if size > f.maxSize() {
		return fmt.Errorf("truncate %s: length %d, limit %d: %w", f.name, size, f.maxSize(), ErrTooLarge)
	}
	cur, err := f.c.StatAt(ctx, f.in.Ino, "")
	if err != nil {
		return err
	}
	f.mu.Lock()
	old := min(max(uint64(cur.Size()), f.size), max(cur.written, f.wrote))
	f.mu.Unlock()
	if f.truncateSmall(uint64(size)) {
		old = 0 // its bytes are not in chunks, and the service cuts them
	}
	if uint64(size) < old {
		if err := f.trim(ctx, uint64(size), old); err != nil {
			return fmt.Errorf("truncate %s: %w", f.name, err)
		}
	}
	n := uint64(size)
	cctx, done := f.c.call(ctx)
	defer done()
	if _, err := f.c.meta.Setattr(cctx, &metapb.SetattrRequest{At: f.in.Ino, Size: &n, Client: f.c.id, Seq: f.c.next()}); err != nil {
		return fsErr("truncate", f.name, err)
	}
	f.mu.Lock()
	f.size = n
	f.mu.Unlock()
	return nil
}

// Allocate is fallocate(2) for the modes that make sense for chunks, which
// storage allocates as they are written: the default mode extends the
// file's length to off+n if it is shorter (the new bytes read as zeros),
// keepSize (FALLOC_FL_KEEP_SIZE) changes nothing. Neither reserves space
// on storage. A negative offset or a length of 0 or less is ErrInvalid, an
// end past fsmeta.MaxFileSize ErrTooLarge.
func (f *File) Allocate(ctx context.Context, off, n int64, keepSize bool) error {
	if off < 0 || n <= 0 {
		return fmt.Errorf("fallocate %s: offset %d, length %d: %w", f.name, off, n, ErrInvalid)
	}
	if off > f.maxSize()-n {
		return fmt.Errorf("fallocate %s: [%d:+%d] past the largest file (%d bytes): %w", f.name, off, n, f.maxSize(), ErrTooLarge)
	}
	if keepSize {
		return nil
	}
	cur, err := f.c.StatAt(ctx, f.in.Ino, "")
	if err != nil {
		return err
	}
	if off+n > max(cur.Size(), f.Size()) {
		return f.Truncate(ctx, off+n)
	}
	return nil
}

// PunchHole is fallocate(2)'s FALLOC_FL_PUNCH_HOLE (which Linux takes only
// with FALLOC_FL_KEEP_SIZE): [off, off+n) reads as zeros afterwards and the
// length stays. The chunks wholly inside the range are removed from
// storage, the parts of chunks at its ends overwritten with zeros; nothing
// past the length or the file's written mark is touched, as nothing there
// can hold bytes. A negative offset or a length of 0 or less is ErrInvalid.
func (f *File) PunchHole(ctx context.Context, off, n int64) error {
	if off < 0 || n <= 0 {
		return fmt.Errorf("punch a hole in %s: offset %d, length %d: %w", f.name, off, n, ErrInvalid)
	}
	if err := f.toChunks(ctx); err != nil {
		return err
	}
	cur, err := f.c.StatAt(ctx, f.in.Ino, "")
	if err != nil {
		return err
	}
	f.mu.Lock()
	end := min(uint64(off)+uint64(n), max(uint64(cur.Size()), f.size), max(cur.written, f.wrote))
	f.mu.Unlock()
	start, cs := uint64(off), uint64(f.in.Layout.GetChunkSize())
	if start >= end || cs == 0 {
		return nil
	}
	first, last := (start+cs-1)/cs, end/cs // chunks [first, last) lie wholly inside
	if first >= last {
		return f.zero(ctx, start, end)
	}
	if err := f.zero(ctx, start, first*cs); err != nil {
		return err
	}
	if err := f.zero(ctx, last*cs, end); err != nil {
		return err
	}
	return f.removeChunks(ctx, first, last)
}

// zero overwrites [from, to), which lies within one chunk, with zeros.
func (f *File) zero(ctx context.Context, from, to uint64) error {
	if to <= from {
		return nil
	}
	_, err := f.put(ctx, make([]byte, to-from), int64(from))
	return err
}

// removeChunks removes chunks [from, to) of the file from storage.
func (f *File) removeChunks(ctx context.Context, from, to uint64) error {
	cctx, done := f.c.call(ctx)
	defer done()
	for i := from; i < to; i++ {
		if err := f.c.store.Remove(cctx, f.chain(i), chunkio.ID{Inode: f.in.Ino, Index: uint32(i)}); err != nil {
			return err
		}
	}
	return nil
}

// trim makes [size, old) read as zeros: the chunk size falls in gets zeros
// from there to its end, and the chunks after it are removed.
func (f *File) trim(ctx context.Context, size, old uint64) error {
	cs := uint64(f.in.Layout.GetChunkSize())
	if cs == 0 {
		return nil
	}
	next := (size + cs - 1) / cs // the first chunk wholly past size
	if err := f.zero(ctx, size, min(next*cs, old)); err != nil {
		return err
	}
	return f.removeChunks(ctx, next, (old+cs-1)/cs)
}
