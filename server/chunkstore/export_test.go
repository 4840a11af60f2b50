package chunkstore

import "github.com/cockroachdb/pebble/v2"

// Internals the external tests (package chunkstore_test, which can use
// chunkstoretest) check the on-disk format against. Test builds only.
var (
	FileName   = fileName
	ChunkKey   = chunkKey
	NewVersion = newVersion
	FreeSlot   = freeSlot
)

// DB is the target's metadata store.
func (e *Engine) DB() *pebble.DB { return e.db }
