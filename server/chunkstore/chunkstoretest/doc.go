// Package chunkstoretest is test support for code built on the chunk store
// (server/chunkstore): FaultFS, an FS that injects I/O errors and lost
// writes, and helpers that open an engine for a test and write and read
// chunks through it, failing the test on any error.
//
// It owns no production behaviour and must never be imported outside
// tests: fault injection lives beside the seam it wraps (chunkstore.FS),
// not inside the package that ships.
package chunkstoretest
