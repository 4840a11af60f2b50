package sdk

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/sluicefs/sluice/proto/metapb"
)

// The *At calls name entries the way openat(2) does: p relative to the
// directory inode at, or with at == 0 an absolute path; an empty p with at
// set names inode at itself. The FUSE adapter uses them, since the kernel
// names everything by (directory inode, name); the path calls are the same
// calls with at == 0. Every call checks its paths first (checkPath, in
// path.go): a path that is not absolute where it must be, or that holds an
// empty, "." or ".." name, is refused with fs.ErrInvalid and never sent.

// Owner is the owner and permission bits a new inode gets.
type Owner struct {
	Mode     uint32
	UID, GID uint32
}

// where is how errors name (at, p).
func where(at uint64, p string) string {
	if at == 0 {
		return p
	}
	return fmt.Sprintf("inode %d:%s", at, p)
}

// info is the answer to a call that makes or finds the inode (at, p).
func info(op string, at uint64, p string, in *metapb.Inode, err error) (*FileInfo, error) {
	if err != nil {
		return nil, fsErr(op, where(at, p), err)
	}
	return newFileInfo(baseName(at, p), in), nil
}

// StatAt returns the inode (at, p) names.
func (c *Client) StatAt(ctx context.Context, at uint64, p string) (*FileInfo, error) {
	if err := checkPath("stat", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Stat(cctx, &metapb.PathRequest{At: at, Path: p})
	return info("stat", at, p, in, err)
}

// ListAt returns up to limit entries of directory (at, p) after the name
// after, each with its inode (DirEntry.Info fails for one removed
// meanwhile), and whether there are more.
func (c *Client) ListAt(ctx context.Context, at uint64, p, after string, limit int) ([]DirEntry, bool, error) {
	if err := checkPath("readdir", at, p); err != nil {
		return nil, false, err
	}
	cctx, done := c.call(ctx)
	defer done()
	r, err := c.meta.List(cctx, &metapb.ListRequest{At: at, Path: p, After: after, Limit: uint32(limit), WithInodes: true})
	if err != nil {
		return nil, false, fsErr("readdir", where(at, p), err)
	}
	out := make([]DirEntry, len(r.Entries))
	for i, e := range r.Entries {
		var in *metapb.Inode
		if i < len(r.Inodes) && r.Inodes[i].GetIno() != 0 {
			in = r.Inodes[i]
		}
		out[i] = newDirEntry(e, in)
	}
	return out, r.More, nil
}

// MkdirAt makes a directory.
func (c *Client) MkdirAt(ctx context.Context, at uint64, p string, o Owner) (*FileInfo, error) {
	if err := checkPath("mkdir", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Mkdir(cctx, &metapb.MakeRequest{At: at, Path: p, Mode: o.Mode, Uid: o.UID, Gid: o.GID, Client: c.id, Seq: c.next()})
	return info("mkdir", at, p, in, err)
}

// CreateAt makes an empty file (it does not open it).
func (c *Client) CreateAt(ctx context.Context, at uint64, p string, o Owner) (*FileInfo, error) {
	if err := checkPath("create", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Create(cctx, &metapb.MakeRequest{At: at, Path: p, Mode: o.Mode, Uid: o.UID, Gid: o.GID, Client: c.id, Seq: c.next()})
	return info("create", at, p, in, err)
}

// CreateTempAt makes a file with no name in the directory (at, p), as
// open(2)'s O_TMPFILE does (it does not open it): LinkAt gives it a name;
// without one it is collected once no handle has it open.
func (c *Client) CreateTempAt(ctx context.Context, at uint64, p string, o Owner) (*FileInfo, error) {
	if err := checkPath("create", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Create(cctx, &metapb.MakeRequest{At: at, Path: p, Mode: o.Mode, Uid: o.UID, Gid: o.GID, Tmpfile: true, Client: c.id, Seq: c.next()})
	return info("create", at, p, in, err)
}

// SymlinkAt makes (at, p) a symbolic link to target.
func (c *Client) SymlinkAt(ctx context.Context, at uint64, p, target string, o Owner) (*FileInfo, error) {
	if err := checkPath("symlink", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Symlink(cctx, &metapb.SymlinkRequest{At: at, Path: p, Target: target, Uid: o.UID, Gid: o.GID, Client: c.id, Seq: c.next()})
	return info("symlink", at, p, in, err)
}

// UnlinkAt removes a name that is not a directory's; a file's chunks go
// (through the collector) when its last name does and no writer holds it.
func (c *Client) UnlinkAt(ctx context.Context, at uint64, p string) error {
	if err := checkPath("unlink", at, p); err != nil {
		return err
	}
	c.sendEnds() // sessions of files this client closed go first: an unlinked file they held would wait for the collector
	cctx, done := c.call(ctx)
	defer done()
	_, err := c.meta.Unlink(cctx, &metapb.PathRequest{At: at, Path: p, Client: c.id, Seq: c.next()})
	return fsErr("unlink", where(at, p), err)
}

// RmdirAt removes an empty directory.
func (c *Client) RmdirAt(ctx context.Context, at uint64, p string) error {
	if err := checkPath("rmdir", at, p); err != nil {
		return err
	}
	cctx, done := c.call(ctx)
	defer done()
	_, err := c.meta.Rmdir(cctx, &metapb.PathRequest{At: at, Path: p, Client: c.id, Seq: c.next()})
	return fsErr("rmdir", where(at, p), err)
}

// RenameAt moves (fromAt, from) to (toAt, to) atomically, replacing a file
// there, or an empty directory by a directory.
func (c *Client) RenameAt(ctx context.Context, fromAt uint64, from string, toAt uint64, to string) error {
	return c.rename(ctx, &metapb.RenameRequest{FromAt: fromAt, From: from, ToAt: toAt, To: to})
}

// RenameNoReplaceAt is RenameAt that fails with ErrExist if (toAt, to)
// exists, checked and renamed in one step (renameat2's RENAME_NOREPLACE).
func (c *Client) RenameNoReplaceAt(ctx context.Context, fromAt uint64, from string, toAt uint64, to string) error {
	return c.rename(ctx, &metapb.RenameRequest{FromAt: fromAt, From: from, ToAt: toAt, To: to, NoReplace: true})
}

func (c *Client) rename(ctx context.Context, req *metapb.RenameRequest) error {
	if err := checkPath("rename", req.FromAt, req.From); err != nil {
		return err
	}
	if err := checkPath("rename", req.ToAt, req.To); err != nil {
		return err
	}
	c.sendEnds() // as UnlinkAt: a rename may replace a file
	cctx, done := c.call(ctx)
	defer done()
	req.Client, req.Seq = c.id, c.next()
	_, err := c.meta.Rename(cctx, req)
	fromAt, from := req.FromAt, req.From
	return fsErr("rename", where(fromAt, from), err)
}

// LinkAt gives the file (at, p) the new name (newAt, newP).
func (c *Client) LinkAt(ctx context.Context, at uint64, p string, newAt uint64, newP string) (*FileInfo, error) {
	if err := checkPath("link", at, p); err != nil {
		return nil, err
	}
	if err := checkPath("link", newAt, newP); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Link(cctx, &metapb.LinkRequest{At: at, Path: p, NewAt: newAt, NewPath: newP, Client: c.id, Seq: c.next()})
	return info("link", newAt, newP, in, err)
}

// OpenAt opens the file (at, p), for writing too when write is set.
func (c *Client) OpenAt(ctx context.Context, at uint64, p string, write bool) (*File, error) {
	return c.open(ctx, "open", &metapb.OpenRequest{At: at, Path: p, Write: write})
}

// CreateOpenAt makes file (at, p), which must not exist (else ErrExist),
// and opens it for writing, in one write to the metadata log where
// CreateAt and OpenAt take two: open(2) with O_CREAT|O_EXCL.
func (c *Client) CreateOpenAt(ctx context.Context, at uint64, p string, o Owner) (*File, error) {
	return c.open(ctx, "create", &metapb.OpenRequest{At: at, Path: p, Write: true, Create: true, Mode: o.Mode, Uid: o.UID, Gid: o.GID})
}

// open sends req, as op, with the client's id and next number.
func (c *Client) open(ctx context.Context, op string, req *metapb.OpenRequest) (*File, error) {
	at, p, write := req.At, req.Path, req.Write
	if err := checkPath(op, at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	req.Client, req.Seq = c.id, c.next()
	r, err := c.meta.Open(cctx, req)
	if err != nil {
		return nil, fsErr(op, where(at, p), err)
	}
	name := where(at, p)
	if at == 0 {
		name = path.Clean("/" + strings.TrimPrefix(p, "/"))
	}
	if !write {
		c.leases.hold(r.Inode.Ino) // the open took the first lease
	} else if r.Session != 0 {
		c.writing.Add(1)
	}
	// A session covers the file's first chunk; beyond it and its written
	// mark, a writer reserves before it stores (File.reserve).
	reserved := max(writtenMark(r.Inode), uint64(r.Inode.GetLayout().GetChunkSize()))
	f := &File{c: c, name: name, in: r.Inode, chains: r.Chains, session: r.Session, size: r.Inode.Size, reserved: reserved}
	f.openSmall(r, write)
	return f, nil
}
