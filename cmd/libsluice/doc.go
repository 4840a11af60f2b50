// Command libsluice is Sluice's C ABI: built with -buildmode=c-shared into
// libsluice.so and libsluice.h, it is what the Python package loads with
// ctypes (and what any other language can).
//
// Conventions: objects (clients, datasets, loaders, files) are opaque
// uint64 handles into a table on the Go side — C never holds a Go pointer.
// Functions return 0 (or a non-negative count) on success and -1 on
// failure, with the message readable on the same thread through
// sluice_last_error. Every export recovers panics into that error. Arrow
// data leaves through the C data and stream interfaces; batch buffers are
// mmap'd registered memory, freed when the consumer calls the release
// callback. Options and loader state travel as JSON strings.
//
// A Go runtime does not survive fork(): a process that forks after loading
// the library must not use it in the child (the Python package enforces
// this and asks for the spawn or forkserver start methods).
package main
