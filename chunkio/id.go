package chunkio

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicefs/sluice/fabric"
	"github.com/sluicefs/sluice/internal/crc32c"
	"github.com/sluicefs/sluice/proto/storagepb"
)

// ID names chunk Index of file Inode.
type ID struct {
	Inode uint64
	Index uint32
}

func (c ID) String() string { return fmt.Sprintf("%d:%d", c.Inode, c.Index) }

// Proto converts to the wire form.
func (c ID) Proto() *storagepb.ChunkID {
	return &storagepb.ChunkID{Inode: c.Inode, Index: c.Index}
}

// FromProto converts from the wire form.
func FromProto(p *storagepb.ChunkID) ID {
	return ID{Inode: p.GetInode(), Index: p.GetIndex()}
}

// CRC is the CRC32C every chunk check uses (Castagnoli).
func CRC(b []byte) uint32 { return crc32c.Checksum(b) }

// Fabric methods a storage node serves to clients.
const (
	MethodUpdate = "storage.Update"
	MethodRead   = "storage.Read"
	MethodQuery  = "storage.Query"
	MethodRemove = "storage.Remove"
)

// Retryable reports errors that new routing may cure.
func Retryable(err error) bool {
	return errors.Is(err, ErrStaleChainVersion) || errors.Is(err, ErrNotHead) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, fabric.ErrPeerClosed) || errors.Is(err, fabric.ErrUnreachable) ||
		errors.Is(err, fabric.ErrUnknownMethod) || // a node still starting
		errors.Is(err, fabric.ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNotCommitted)
}
