// Package server holds Sluice's services, one sub-package each: mgmtd
// (cluster map and failover), meta (namespace), storage (chunk engine and
// CRAQ chains) and raftstore (hashicorp/raft on Pebble).
//
// Not built yet: see the storage and control-plane issues. Nothing under
// server imports sdk or dataset.
package server
