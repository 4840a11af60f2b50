// Package server holds Sluice's services, one sub-package each: mgmtd
// (cluster map and failover), meta (namespace), storage (chunk engine and
// CRAQ chains) and raftstore (hashicorp/raft on Pebble).
//
// Each package's doc says what it owns. Nothing under server imports sdk
// or dataset; cluster runs the pieces as processes (sluice dev, sluice
// server).
package server
