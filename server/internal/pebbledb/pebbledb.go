package pebbledb

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Open opens (creating if needed) the Pebble store in dir. Pebble's errors
// (a failed flush or compaction: a failing disk) go to log at error level,
// and a disk slow to answer or a write stall at warn level (nil log:
// slog.Default()); its informational chatter is dropped. Callers wrap the
// returned error with what the store is for. cacheBytes sizes the store's
// block cache (0: Pebble's default, 8 MiB).
func Open(dir string, log *slog.Logger, cacheBytes int64) (*pebble.DB, error) {
	return open(dir, vfs.Default, log, cacheBytes)
}

func open(dir string, fs vfs.FS, log *slog.Logger, cacheBytes int64) (*pebble.DB, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("pebble", dir)
	events := &pebble.EventListener{
		DiskSlow: func(info pebble.DiskSlowInfo) {
			log.Warn("pebble: disk slow", "path", info.Path, "op", info.OpType.String(), "took", info.Duration)
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("pebble: write stall", "reason", info.Reason)
		},
	}
	return pebble.Open(dir, &pebble.Options{FS: fs, Logger: Logger{log}, EventListener: events, CacheSize: cacheBytes})
}

// Logger is a pebble.Logger on slog: errors are logged at error level,
// informational messages dropped, and a fatal one is logged and then
// panics, as Pebble's own default logger does (Pebble stops there).
type Logger struct{ Log *slog.Logger }

// Infof drops Pebble's informational messages (flushes, compactions, WAL
// recycling): they would drown the errors.
func (Logger) Infof(string, ...any) {}

// Errorf logs one of Pebble's errors, such as a failed background
// compaction or a disk that refuses writes.
func (l Logger) Errorf(format string, args ...any) {
	l.Log.Error(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// Fatalf logs and panics.
func (l Logger) Fatalf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	l.Log.Error(msg, "fatal", true)
	panic(msg)
}
