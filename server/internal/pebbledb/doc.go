// Package pebbledb owns how the servers open their Pebble stores: one place
// for the options every store shares, such as keeping Pebble's informational
// chatter out of our logs.
package pebbledb
