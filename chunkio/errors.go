package chunkio

import "github.com/sluicefs/sluice/fabric"

// Errors a storage target returns; they keep their identity across fabric
// calls (errors.Is works on the client's side).
var (
	ErrStaleChainVersion = fabric.NewError(fabric.FirstAppCode+1, "storage: stale chain version")
	ErrNotCommitted      = fabric.NewError(fabric.FirstAppCode+2, "storage: chunk has an update in flight")
	ErrChecksum          = fabric.NewError(fabric.FirstAppCode+3, "storage: chunk checksum mismatch")
	ErrVersion           = fabric.NewError(fabric.FirstAppCode+4, "storage: chunk version conflict")
	ErrNoSpace           = fabric.NewError(fabric.FirstAppCode+5, "storage: no space left on target")
	ErrTooLarge          = fabric.NewError(fabric.FirstAppCode+6, "storage: beyond the chunk size limit")
	ErrNotFound          = fabric.NewError(fabric.FirstAppCode+7, "storage: no such chunk")
	ErrNotHead           = fabric.NewError(fabric.FirstAppCode+8, "storage: target is not the chain's head")
	ErrUnavailable       = fabric.NewError(fabric.FirstAppCode+9, "storage: target not serving")
	// ErrDiverged: a replica's copy of a version differs from the head's
	// (same number, other bytes); the head sends the whole chunk instead.
	ErrDiverged = fabric.NewError(fabric.FirstAppCode+10, "storage: replica diverged from the chain's head")
)
