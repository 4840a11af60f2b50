// Package errcode is the one table of Sluice's application error codes:
// every error a server answers with that a client tests for carries one
// of these codes across fabric calls and gRPC (fabric.NewError), and no two
// errors share one (the test checks). The errors themselves live with
// their services: chunkio (storage), fsmeta (metadata), mgmtd.
package errcode

import "github.com/sluicefs/sluice/fabric"

const app = fabric.FirstAppCode

// Storage (chunkio).
const (
	StaleChainVersion fabric.Code = app + 1
	NotCommitted      fabric.Code = app + 2
	Checksum          fabric.Code = app + 3
	Version           fabric.Code = app + 4
	NoSpace           fabric.Code = app + 5
	TooLarge          fabric.Code = app + 6
	ChunkNotFound     fabric.Code = app + 7
	NotHead           fabric.Code = app + 8
	Unavailable       fabric.Code = app + 9
	Diverged          fabric.Code = app + 10
)

// Metadata (fsmeta).
const (
	NotFound      fabric.Code = app + 100
	Exist         fabric.Code = app + 101
	NotDir        fabric.Code = app + 102
	IsDir         fabric.Code = app + 103
	NotEmpty      fabric.Code = app + 104
	InvalidName   fabric.Code = app + 105
	NameTooLong   fabric.Code = app + 106
	Loop          fabric.Code = app + 107
	Stale         fabric.Code = app + 108
	NotLeader     fabric.Code = app + 109
	TooManyLeases fabric.Code = app + 110
	FileTooLarge  fabric.Code = app + 111
	NoXattr       fabric.Code = app + 112
	XattrRange    fabric.Code = app + 113
	XattrTooBig   fabric.Code = app + 114
	NotSupported  fabric.Code = app + 115
	NotInline     fabric.Code = app + 116
)

// Cluster management (mgmtd).
const (
	BadCommand fabric.Code = app + 200
)
