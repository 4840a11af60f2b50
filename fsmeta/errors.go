package fsmeta

import (
	"strconv"

	"github.com/sluicefs/sluice/errcode"
	"github.com/sluicefs/sluice/fabric"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Errors the namespace returns; each keeps its identity across the wire.
var (
	ErrNotFound    = fabric.NewError(errcode.NotFound, "meta: no such file or directory")
	ErrExist       = fabric.NewError(errcode.Exist, "meta: file exists")
	ErrNotDir      = fabric.NewError(errcode.NotDir, "meta: not a directory")
	ErrIsDir       = fabric.NewError(errcode.IsDir, "meta: is a directory")
	ErrNotEmpty    = fabric.NewError(errcode.NotEmpty, "meta: directory not empty")
	ErrInvalidName = fabric.NewError(errcode.InvalidName, "meta: invalid name")
	ErrNameTooLong = fabric.NewError(errcode.NameTooLong, "meta: name too long")
	ErrLoop        = fabric.NewError(errcode.Loop, "meta: cannot move a directory into itself")
	ErrStale       = fabric.NewError(errcode.Stale, "meta: stale file handle")
	// ErrTooManyLeases refuses read leases beyond what the leader keeps.
	ErrTooManyLeases = fabric.NewError(errcode.TooManyLeases, "meta: too many files held open for reading")
	// ErrFileTooLarge refuses a length or a write past MaxFileSize (EFBIG).
	ErrFileTooLarge = fabric.NewError(errcode.FileTooLarge, "meta: file too large")
	// Extended attributes: no such attribute (ENODATA), a name empty or
	// too long (ERANGE), a value or list too big (E2BIG).
	ErrNoXattr     = fabric.NewError(errcode.NoXattr, "meta: no such extended attribute")
	ErrXattrRange  = fabric.NewError(errcode.XattrRange, "meta: extended attribute name empty or too long")
	ErrXattrTooBig = fabric.NewError(errcode.XattrTooBig, "meta: extended attribute too big")
	// ErrNotSupported: an operation Sluice does not do on that inode or
	// with those arguments (EOPNOTSUPP), such as an extended attribute
	// outside the user, trusted and security namespaces.
	ErrNotSupported = fabric.NewError(errcode.NotSupported, "meta: operation not supported")
	// ErrNotInline refuses to keep a file's bytes inline (a close with
	// its content): another write session is open on it, or the bytes are
	// more than the service keeps. The writer stores them in chunks.
	ErrNotInline = fabric.NewError(errcode.NotInline, "meta: file not kept inline")
)

// ErrNotLeader: this replica cannot take the request; the error names the
// leader when it knows one.
var ErrNotLeader = fabric.NewError(errcode.NotLeader, "meta: not the leader")

// ErrorDomain marks the gRPC error details that carry a namespace error's
// fabric code (ErrorInfo.Reason, in decimal); see ErrorOf.
const ErrorDomain = "meta.sluice"

// CodeOf returns the namespace error a gRPC error carries (ErrNotEmpty and
// the others, matching with errors.Is), or nil.
func ErrorOf(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			if c, err := strconv.Atoi(info.Reason); err == nil {
				return fabric.RemoteError(fabric.Code(c), st.Message())
			}
		}
	}
	return nil
}
