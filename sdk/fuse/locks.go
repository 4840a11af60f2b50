package fuse

import (
	"context"
	"errors"
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/sdk"
)

// File locks, flock(2) and fcntl(2)'s POSIX locks, held cluster-wide by
// the SDK (sdk.Client.LockAt): two mounts on two machines exclude each
// other as two processes on one do. The kernel sends flocks as whole-file
// locks flagged LK_FLOCK, with the open file as the owner; close drops an
// owner's POSIX locks (Flush) and the last close its flocks (Release).

func lockOf(in *gofuse.LkIn) sdk.LockInfo {
	return sdk.LockInfo{Type: in.Lk.Typ, Start: in.Lk.Start, End: in.Lk.End, Pid: in.Lk.Pid,
		Owner: in.Owner, Flock: in.LkFlags&gofuse.LK_FLOCK != 0}
}

func (fs *FS) GetLk(cancel <-chan struct{}, in *gofuse.LkIn, out *gofuse.LkOut) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	k, err := fs.c.TestLockAt(ctx, in.NodeId, lockOf(in))
	if err != nil {
		return fs.errno("getlk", in.NodeId, err)
	}
	if k == nil {
		out.Lk = gofuse.FileLock{Typ: syscall.F_UNLCK}
		return gofuse.OK
	}
	out.Lk = gofuse.FileLock{Start: k.Start, End: k.End, Typ: k.Type, Pid: k.Pid}
	return gofuse.OK
}

func (fs *FS) SetLk(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	return fs.setLk(cancel, in, false)
}

func (fs *FS) SetLkw(cancel <-chan struct{}, in *gofuse.LkIn) gofuse.Status {
	return fs.setLk(cancel, in, true)
}

// setLk takes or releases a lock; waiting for one ends when the kernel
// interrupts the call (a signal): EINTR.
func (fs *FS) setLk(cancel <-chan struct{}, in *gofuse.LkIn, wait bool) gofuse.Status {
	ctx, done := fs.op()
	defer done()
	if wait {
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(context.Background())
		defer stop()
		go func() {
			select {
			case <-cancel:
				stop()
			case <-ctx.Done():
			}
		}()
	}
	err := fs.c.LockAt(ctx, in.NodeId, lockOf(in), wait)
	if errors.Is(err, sdk.ErrLocked) {
		return gofuse.EAGAIN
	}
	return fs.status("setlk", in.NodeId, err)
}
