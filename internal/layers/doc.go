// Package layers holds no code: its test keeps Sluice's imports pointing
// down (ARCHITECTURE.md). The transport (fabric) and the shared-memory
// rings (shmring) import nothing of Sluice's above them; the client side
// (sdk, sdk/fuse, dataset, cmd/libsluice) links neither Raft nor Pebble,
// nor anything under server/; mgmtd does not import the storage servers.
package layers
