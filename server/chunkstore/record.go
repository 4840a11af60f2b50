package chunkstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/storagepb"
)

// chunkKey is the chunk's metadata key: big-endian, so one file's chunks sort
// together and in order.
func chunkKey(c chunkio.ID) []byte {
	k := make([]byte, 13)
	k[0] = 'c'
	binary.BigEndian.PutUint64(k[1:], c.Inode)
	binary.BigEndian.PutUint32(k[9:], c.Index)
	return k
}

func chunkFromKey(k []byte) (chunkio.ID, bool) {
	if len(k) != 13 || k[0] != 'c' {
		return chunkio.ID{}, false
	}
	return chunkio.ID{Inode: binary.BigEndian.Uint64(k[1:]), Index: binary.BigEndian.Uint32(k[9:])}, true
}

// Meta returns the chunk's record (an empty one if the chunk is unknown).
// It is shared: callers must not change it. Records are cached decoded,
// because decoding a chunk's block checksums on every small read was most
// of a read's cost; the engine is the only writer, and every write goes
// through putMeta, which replaces the cached record.
func (e *Engine) Meta(id chunkio.ID) (*storagepb.ChunkMeta, error) {
	e.metaMu.RLock()
	m, gen := e.metas[id], e.metaGen
	e.metaMu.RUnlock()
	if m != nil {
		return m, nil
	}
	v, closer, err := e.db.Get(chunkKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return &storagepb.ChunkMeta{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	defer closer.Close()
	m = &storagepb.ChunkMeta{}
	if err := proto.Unmarshal(v, m); err != nil {
		return nil, fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	// Cache what we read only if no record changed since we looked: a write
	// racing with this read must not be undone by it.
	e.metaMu.Lock()
	if e.metaGen == gen {
		e.insertMetaLocked(id, m)
	}
	e.metaMu.Unlock()
	return m, nil
}

// metaForUpdate returns a copy of the chunk's record to change and store.
func (e *Engine) metaForUpdate(id chunkio.ID) (*storagepb.ChunkMeta, error) {
	m, err := e.Meta(id)
	if err != nil {
		return nil, err
	}
	return proto.Clone(m).(*storagepb.ChunkMeta), nil
}

const maxCachedMetas = 1 << 16

// cacheMeta records a write of the chunk's record (nil: removed).
func (e *Engine) cacheMeta(id chunkio.ID, m *storagepb.ChunkMeta) {
	e.metaMu.Lock()
	defer e.metaMu.Unlock()
	e.metaGen++
	if m == nil {
		delete(e.metas, id)
		return
	}
	e.insertMetaLocked(id, m)
}

func (e *Engine) insertMetaLocked(id chunkio.ID, m *storagepb.ChunkMeta) {
	if len(e.metas) >= maxCachedMetas {
		for k := range e.metas { // any one: map order is random
			delete(e.metas, k)
			break
		}
	}
	e.metas[id] = m
}

func (e *Engine) putMeta(id chunkio.ID, m *storagepb.ChunkMeta, sync bool) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	err = e.db.Set(chunkKey(id), b, opts)
	if err != nil {
		e.cacheMeta(id, nil)
		return fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	e.cacheMeta(id, m)
	return nil
}
