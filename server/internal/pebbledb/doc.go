// Package pebbledb owns how the servers open their Pebble stores: one place
// for the options every store shares, such as sending Pebble's errors to the
// process's slog logger and keeping its informational chatter out of it.
package pebbledb
