package pebbledb

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Open opens (creating if needed) the Pebble store in dir. Callers wrap its
// error with what the store is for.
func Open(dir string) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
}

// quietLogger drops Pebble's informational messages; a fatal one panics,
// as Pebble's own default logger does.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
