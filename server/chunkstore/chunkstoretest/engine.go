package chunkstoretest

import (
	"testing"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// Open opens an engine for the test (in a temporary directory unless
// cfg.Dir is set) and closes it when the test ends.
func Open(t testing.TB, cfg chunkstore.EngineConfig) *chunkstore.Engine {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	e, err := chunkstore.OpenEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Write prepares and commits version ver of the chunk: data at off over
// the committed content (or, with full, data as the whole content).
func Write(t testing.TB, e *chunkstore.Engine, id chunkio.ID, ver uint64, off uint32, data []byte, full bool) {
	t.Helper()
	if _, err := e.Prepare(id, ver, off, data, full, 1); err != nil {
		t.Fatalf("prepare %v v%d: %v", id, ver, err)
	}
	if _, err := e.Commit(id, ver); err != nil {
		t.Fatalf("commit %v v%d: %v", id, ver, err)
	}
}

// ReadAll is the chunk's committed content (up to 8 MiB).
func ReadAll(t testing.TB, e *chunkstore.Engine, id chunkio.ID) []byte {
	t.Helper()
	buf := make([]byte, 8<<20)
	n, _, err := e.Read(id, 0, buf)
	if err != nil {
		t.Fatalf("read %v: %v", id, err)
	}
	return buf[:n]
}
