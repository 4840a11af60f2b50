package chunkio

import (
	"github.com/sluicefs/sluice/errcode"
	"github.com/sluicefs/sluice/fabric"
)

// Errors a storage target returns; they keep their identity across fabric
// calls (errors.Is works on the client's side).
var (
	ErrStaleChainVersion = fabric.NewError(errcode.StaleChainVersion, "storage: stale chain version")
	ErrNotCommitted      = fabric.NewError(errcode.NotCommitted, "storage: chunk has an update in flight")
	ErrChecksum          = fabric.NewError(errcode.Checksum, "storage: chunk checksum mismatch")
	ErrVersion           = fabric.NewError(errcode.Version, "storage: chunk version conflict")
	ErrNoSpace           = fabric.NewError(errcode.NoSpace, "storage: no space left on target")
	ErrTooLarge          = fabric.NewError(errcode.TooLarge, "storage: beyond the chunk size limit")
	ErrNotFound          = fabric.NewError(errcode.ChunkNotFound, "storage: no such chunk")
	ErrNotHead           = fabric.NewError(errcode.NotHead, "storage: target is not the chain's head")
	ErrUnavailable       = fabric.NewError(errcode.Unavailable, "storage: target not serving")
	// ErrDiverged: a replica's copy of a version differs from the head's
	// (same number, other bytes); the head sends the whole chunk instead.
	ErrDiverged = fabric.NewError(errcode.Diverged, "storage: replica diverged from the chain's head")
)
