package fuse

import (
	"context"
	"errors"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// errnos maps the SDK's conditions to what a local file system returns.
var errnos = []struct {
	err   error
	errno gofuse.Status
}{
	{sdk.ErrNotExist, gofuse.Status(syscall.ENOENT)},
	{sdk.ErrStale, gofuse.Status(syscall.ENOENT)},
	{sdk.ErrExist, gofuse.Status(syscall.EEXIST)},
	{sdk.ErrNotDir, gofuse.Status(syscall.ENOTDIR)},
	{sdk.ErrIsDir, gofuse.Status(syscall.EISDIR)},
	{sdk.ErrNotEmpty, gofuse.Status(syscall.ENOTEMPTY)},
	{sdk.ErrNameTooLong, gofuse.Status(syscall.ENAMETOOLONG)},
	{sdk.ErrLoop, gofuse.Status(syscall.EINVAL)},
	{sdk.ErrInvalid, gofuse.Status(syscall.EINVAL)},
	{sdk.ErrNoSpace, gofuse.Status(syscall.ENOSPC)},
	{context.Canceled, gofuse.Status(syscall.EINTR)},
}

// errno returns the status for err. Anything else is EIO, logged with the
// error, which names the chunk and the chain for storage failures (a chain
// with no serving replica among them).
func (fs *FS) errno(op string, ino uint64, err error) gofuse.Status {
	if err == nil {
		return gofuse.OK
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	msg := "fuse: I/O error"
	if errors.Is(err, sdk.ErrUnavailable) {
		msg = "fuse: I/O error: a chain has no serving replica"
	}
	fs.log.Error(msg, "op", op, "ino", ino, "err", err)
	return gofuse.EIO
}
