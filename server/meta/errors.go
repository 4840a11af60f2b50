package meta

import "github.com/sluicefs/sluice/fabric"

// Errors the namespace returns; each keeps its identity across the wire.
// Codes run FirstAppCode+100 up; +109 is ErrNotLeader (replica.go).
var (
	ErrNotFound    = fabric.NewError(fabric.FirstAppCode+100, "meta: no such file or directory")
	ErrExist       = fabric.NewError(fabric.FirstAppCode+101, "meta: file exists")
	ErrNotDir      = fabric.NewError(fabric.FirstAppCode+102, "meta: not a directory")
	ErrIsDir       = fabric.NewError(fabric.FirstAppCode+103, "meta: is a directory")
	ErrNotEmpty    = fabric.NewError(fabric.FirstAppCode+104, "meta: directory not empty")
	ErrInvalidName = fabric.NewError(fabric.FirstAppCode+105, "meta: invalid name")
	ErrNameTooLong = fabric.NewError(fabric.FirstAppCode+106, "meta: name too long")
	ErrLoop        = fabric.NewError(fabric.FirstAppCode+107, "meta: cannot move a directory into itself")
	ErrStale       = fabric.NewError(fabric.FirstAppCode+108, "meta: stale file handle")
	// ErrTooManyLeases refuses read leases beyond what the leader keeps.
	ErrTooManyLeases = fabric.NewError(fabric.FirstAppCode+110, "meta: too many files held open for reading")
)
