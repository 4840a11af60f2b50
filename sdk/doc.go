// Package sdk is the Go client of a Sluice cluster: routing, the meta and
// storage clients, the File API, batched I/O over fabric, the local agent
// that serves shmring clients, and the FUSE adapter's semantics.
//
// Not built yet: see the SDK issue. It may import server APIs, fabric and
// shmring, never dataset.
package sdk
