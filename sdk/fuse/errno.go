package fuse

import (
	"errors"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// errno returns the status for err: the SDK's errno for it (sdk.Errno, the
// one table the agent answers with too). An EIO is logged with the error,
// which names the chunk and the chain for storage failures (a chain with
// no serving replica among them).
func (fs *FS) errno(op string, ino uint64, err error) gofuse.Status {
	e := sdk.Errno(err)
	if e == syscall.EIO {
		msg := "fuse: I/O error"
		if errors.Is(err, sdk.ErrUnavailable) {
			msg = "fuse: I/O error: a chain has no serving replica"
		}
		fs.log.Error(msg, "op", op, "ino", ino, "err", err)
	}
	return gofuse.Status(e)
}
