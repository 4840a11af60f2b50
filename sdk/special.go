package sdk

import (
	"context"
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/fsmeta"
	"github.com/sluicefs/sluice/proto/metapb"
)

// mknodTypes are the inode types MknodAt makes, by stat(2)'s type bits.
var mknodTypes = map[uint32]metapb.InodeType{
	syscall.S_IFREG:  metapb.InodeType_FILE,
	syscall.S_IFIFO:  metapb.InodeType_FIFO,
	syscall.S_IFCHR:  metapb.InodeType_CHAR_DEVICE,
	syscall.S_IFBLK:  metapb.InodeType_BLOCK_DEVICE,
	syscall.S_IFSOCK: metapb.InodeType_SOCKET,
}

// MknodAt makes (at, p) as mknod(2) does: mode holds the type (S_IFIFO,
// S_IFCHR, S_IFBLK, S_IFSOCK, or S_IFREG for an empty file; 0 means
// S_IFREG) and the permission bits; rdev is a device node's number.
// Sluice keeps the type, mode and rdev; whoever opens the file (the kernel,
// through the mount) gives it its behaviour. Other types are ErrInvalid.
func (c *Client) MknodAt(ctx context.Context, at uint64, p string, mode, rdev uint32, o Owner) (*FileInfo, error) {
	if err := checkPath("mknod", at, p); err != nil {
		return nil, err
	}
	kind := mode & syscall.S_IFMT
	if kind == 0 {
		kind = syscall.S_IFREG
	}
	t, ok := mknodTypes[kind]
	if !ok {
		return nil, fmt.Errorf("mknod %s: file type %#o: %w", where(at, p), kind, ErrInvalid)
	}
	cctx, done := c.call(ctx)
	defer done()
	in, err := c.meta.Mknod(cctx, &metapb.MknodRequest{At: at, Path: p, Type: t, Mode: mode & 0o7777, Uid: o.UID, Gid: o.GID, Rdev: rdev,
		Client: c.id, Seq: c.next()})
	return info("mknod", at, p, in, err)
}

// Xattr flags for SetXattrAt, as setxattr(2)'s.
const (
	XattrCreate  = fsmeta.XattrCreate  // fail with ErrExist if the attribute exists
	XattrReplace = fsmeta.XattrReplace // fail with ErrNoXattr if it does not
)

// GetXattrAt returns extended attribute name of (at, p); ErrNoXattr if it
// has none of that name. Names are namespaced: user.*, trusted.*,
// security.* (fsmeta.CheckXattrName).
func (c *Client) GetXattrAt(ctx context.Context, at uint64, p, name string) ([]byte, error) {
	if err := checkPath("getxattr", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	r, err := c.meta.GetXattr(cctx, &metapb.XattrRequest{At: at, Path: p, Name: name})
	if err != nil {
		return nil, fsErr("getxattr "+name, where(at, p), err)
	}
	return r.Value, nil
}

// ListXattrAt returns the names of the extended attributes of (at, p), in
// name order.
func (c *Client) ListXattrAt(ctx context.Context, at uint64, p string) ([]string, error) {
	if err := checkPath("listxattr", at, p); err != nil {
		return nil, err
	}
	cctx, done := c.call(ctx)
	defer done()
	r, err := c.meta.ListXattr(cctx, &metapb.PathRequest{At: at, Path: p})
	if err != nil {
		return nil, fsErr("listxattr", where(at, p), err)
	}
	return r.Names, nil
}

// SetXattrAt sets extended attribute name of (at, p) to value; flags is
// 0, XattrCreate or XattrReplace. Names are at most 255 bytes
// (ErrXattrRange), values 64 KiB (ErrXattrTooBig).
func (c *Client) SetXattrAt(ctx context.Context, at uint64, p, name string, value []byte, flags uint32) error {
	if err := checkPath("setxattr", at, p); err != nil {
		return err
	}
	cctx, done := c.call(ctx)
	defer done()
	_, err := c.meta.SetXattr(cctx, &metapb.XattrRequest{At: at, Path: p, Name: name, Value: value, Flags: flags, Client: c.id, Seq: c.next()})
	return fsErr("setxattr "+name, where(at, p), err)
}

// RemoveXattrAt removes extended attribute name of (at, p); ErrNoXattr if
// it has none of that name.
func (c *Client) RemoveXattrAt(ctx context.Context, at uint64, p, name string) error {
	if err := checkPath("removexattr", at, p); err != nil {
		return err
	}
	cctx, done := c.call(ctx)
	defer done()
	_, err := c.meta.RemoveXattr(cctx, &metapb.XattrRequest{At: at, Path: p, Name: name, Client: c.id, Seq: c.next()})
	return fsErr("removexattr "+name, where(at, p), err)
}
