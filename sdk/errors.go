package sdk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/fsmeta"
)

// stdError is a condition of the SDK's own that is also one of io/fs's:
// errors.Is matches it against both sdk.ErrNotExist and fs.ErrNotExist.
type stdError struct {
	msg string
	std error
}

func (e *stdError) Error() string { return e.msg }
func (e *stdError) Unwrap() error { return e.std }

// Conditions callers branch on. Every error a call returns for a missing
// name matches ErrNotExist and fs.ErrNotExist; for a name that is there
// already, ErrExist and fs.ErrExist; for a path or argument no call
// accepts, ErrInvalid and fs.ErrInvalid; for a refused cluster token,
// fs.ErrPermission. The others are the cluster's own errors, so errors.Is
// matches them whichever side made them.
var (
	ErrNotExist error = &stdError{"sluice: no such file or directory", fs.ErrNotExist}
	ErrExist    error = &stdError{"sluice: file exists", fs.ErrExist}

	ErrNotDir      = fsmeta.ErrNotDir
	ErrIsDir       = fsmeta.ErrIsDir
	ErrNotEmpty    = fsmeta.ErrNotEmpty
	ErrInvalid     = fsmeta.ErrInvalidName // a name or argument no call accepts
	ErrNameTooLong = fsmeta.ErrNameTooLong
	ErrLoop        = fsmeta.ErrLoop // a directory moved into itself
	ErrStale       = fsmeta.ErrStale
	ErrNoSpace     = chunkio.ErrNoSpace
	ErrUnavailable = chunkio.ErrUnavailable // a chain with no serving replica

	// Batched I/O (ReadBatch, WriteBatch, the agent).
	ErrNotWritable = errors.New("sluice: file not open for writing")
	ErrOutOfRange  = errors.New("sluice: range outside its buffer")
	ErrTooLarge    = fsmeta.ErrFileTooLarge // past fsmeta.MaxFileSize (EFBIG)

	// Extended attributes: none of that name (ENODATA), a name empty or
	// too long (ERANGE), a value or list too big (E2BIG); and what Sluice
	// does not do (EOPNOTSUPP), such as a namespace other than user,
	// trusted and security.
	ErrNoXattr      = fsmeta.ErrNoXattr
	ErrXattrRange   = fsmeta.ErrXattrRange
	ErrXattrTooBig  = fsmeta.ErrXattrTooBig
	ErrNotSupported = fsmeta.ErrNotSupported

	// ErrTimeout: a call ran past Config.OpTimeout. It matches
	// context.DeadlineExceeded too.
	ErrTimeout error = &stdError{"sluice: operation timed out (Config.OpTimeout)", context.DeadlineExceeded}
	// ErrUnreachable: Connect found no control-plane replica to talk to
	// (connection refused, an address that does not resolve).
	ErrUnreachable = errors.New("sluice: cluster unreachable")

	// ErrClosed is the cause (context.Cause) of the cancellation of calls
	// in flight when the client is closed.
	ErrClosed = errors.New("sluice: client closed")
)

// fsErr turns a control-plane status into an error callers can test: it
// names the op and the path, and wraps the SDK's and io/fs's condition
// beside the cluster's own (errors.Is(err, ErrNotEmpty) and the like).
func fsErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	cause := err
	if e := fsmeta.ErrorOf(err); e != nil {
		cause = e
	}
	var also error
	switch status.Code(err) {
	case codes.NotFound:
		also = ErrNotExist
	case codes.AlreadyExists:
		also = ErrExist
	case codes.InvalidArgument: // as checkPath's refusals are
		also = fs.ErrInvalid
	case codes.PermissionDenied, codes.Unauthenticated:
		also = fs.ErrPermission
	case codes.Canceled:
		also = context.Canceled
	case codes.DeadlineExceeded:
		also = context.DeadlineExceeded
	default:
		return fmt.Errorf("%s %s: %w", op, p, cause)
	}
	return fmt.Errorf("%s %s: %w (%w)", op, p, also, cause)
}

// errnos is the one table of what a POSIX caller gets for an SDK error:
// the FUSE mount answers the kernel with it, the agent completes ring
// entries with it. The first entry err matches wins.
var errnos = []struct {
	err   error
	errno syscall.Errno
}{
	{fs.ErrNotExist, syscall.ENOENT}, // ErrNotExist too
	{ErrStale, syscall.ENOENT},       // an inode gone from under a handle
	{fs.ErrExist, syscall.EEXIST},    // ErrExist too
	{ErrNotDir, syscall.ENOTDIR},
	{ErrIsDir, syscall.EISDIR},
	{ErrNotEmpty, syscall.ENOTEMPTY},
	{ErrNameTooLong, syscall.ENAMETOOLONG},
	{ErrLoop, syscall.EINVAL}, // rename(2)'s answer for moving a directory into itself
	{ErrInvalid, syscall.EINVAL},
	{fs.ErrInvalid, syscall.EINVAL},
	{fs.ErrPermission, syscall.EACCES},
	{ErrNoSpace, syscall.ENOSPC},
	{ErrNotWritable, syscall.EBADF},
	{ErrOutOfRange, syscall.EINVAL},
	{ErrTooLarge, syscall.EFBIG},
	{ErrNoXattr, syscall.ENODATA},
	{ErrXattrRange, syscall.ERANGE},
	{ErrXattrTooBig, syscall.E2BIG},
	{ErrNotSupported, syscall.EOPNOTSUPP},
	{ErrLocked, syscall.EAGAIN},
	{context.Canceled, syscall.EINTR},
	{context.DeadlineExceeded, syscall.ETIMEDOUT},
}

// Errno is the errno a POSIX caller gets for err, 0 for nil; the FUSE
// mount and the agent both answer with it, so an application sees the
// same errno for the same failure whichever way it reaches the cluster.
//
// Conditions with a POSIX name get it: ENOENT, EEXIST, ENOTDIR, EISDIR,
// ENOTEMPTY, ENAMETOOLONG, EINVAL (bad names and ranges, and a directory
// moved into itself), EACCES (a refused token), ENOSPC (a storage target
// out of space: the write cannot succeed until space is freed, and tools
// such as cp and dd report it as "No space left on device"), EBADF (a
// write through a handle opened for reading), EFBIG (past the largest
// file the layout allows). A call cut short is EINTR (cancelled: the
// caller or the client's Close gave up on it) or ETIMEDOUT (past its
// deadline).
//
// ErrUnavailable (a chain with no serving replica) is EIO, not EAGAIN:
// by the time it reaches a caller the SDK has already followed routing
// and retried for as long as the call's context allowed, so "try again
// at once" is not the advice it stands for, and EAGAIN on a regular file
// means "would block" to POSIX code, which some loops spin on. EIO is
// what a local disk or NFS gives for storage that cannot serve. Anything
// else is EIO too; the error itself says more (the FUSE mount logs it).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnos {
		if errors.Is(err, e.err) {
			return e.errno
		}
	}
	return syscall.EIO
}
