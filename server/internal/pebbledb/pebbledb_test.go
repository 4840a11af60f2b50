package pebbledb

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestErrorsLogged: a flush that fails because the disk refuses to write
// new tables is logged at error level, naming the store, and the store
// recovers once the disk does.
func TestErrorsLogged(t *testing.T) {
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logged := func() string {
		b, _ := os.ReadFile(logFile.Name())
		return string(b)
	}
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	}))
	db, err := open(dir, fs, slog.New(slog.NewTextHandler(logFile, nil)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logged(), "injected error"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no error logged for a failed flush; log:\n%s", logged())
		}
	}
	failing.Store(false)
	if err := <-flushed; err != nil {
		t.Fatalf("flush once the disk writes again: %v", err)
	}
	log := logged()
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "pebble="+dir) {
		t.Errorf("the failed flush is not logged as an error of the store %s:\n%s", dir, log)
	}
}
