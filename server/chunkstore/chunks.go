package chunkstore

import (
	"fmt"

	"github.com/sluicefs/sluice/chunkio"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sluicefs/sluice/proto/storagepb"
)

// Chunks calls fn for every chunk in ID order until fn returns false.
func (e *Engine) Chunks(fn func(chunkio.ID, *storagepb.ChunkMeta) bool) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		id, ok := chunkFromKey(it.Key())
		if !ok {
			continue
		}
		m := &storagepb.ChunkMeta{}
		if err := proto.Unmarshal(it.Value(), m); err != nil {
			return fmt.Errorf("chunk %v metadata: %w", id, err)
		}
		if !fn(id, m) {
			break
		}
	}
	return it.Error()
}

// Remove deletes a chunk: metadata first (synced), then its files, and
// their removal is synced too: a file of a removed chunk that came back
// after a crash could otherwise be taken by a chunk of the same name
// created later.
func (e *Engine) Remove(id chunkio.ID) error {
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	err := e.db.Delete(chunkKey(id), pebble.Sync)
	e.cacheMeta(id, nil)
	if err != nil {
		return fmt.Errorf("chunk %v metadata: %w", id, err)
	}
	for slot := uint32(0); slot < 2; slot++ {
		if err := e.dropFile(id, slot); err != nil {
			return err
		}
	}
	if err := e.fs.SyncDir(e.chunks); err != nil {
		return diskError(id, err)
	}
	return nil
}

// dropFile removes one of the chunk's files under its slot's lock: readers
// holding a view of it see it written over (slotWritten), and the file
// cache lets it go. Syncing the directory is the caller's.
func (e *Engine) dropFile(id chunkio.ID, slot uint32) error {
	l := e.slotLock(id, slot)
	l.Lock()
	defer l.Unlock()
	e.slotWritten(id, slot)
	e.files.evict(fileKey{id, slot})
	if err := e.fs.Remove(join(e.chunks, fileName(id, slot))); err != nil && !isNotExist(err) {
		return diskError(id, err)
	}
	return nil
}

// ChunkCount is how many chunks the target holds: a walk of the records'
// keys (no values decoded), for metrics.
func (e *Engine) ChunkCount() (int, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'c'}, UpperBound: []byte{'d'}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if _, ok := chunkFromKey(it.Key()); ok {
			n++
		}
	}
	return n, it.Error()
}
