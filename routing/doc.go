// Package routing is the contract between Sluice's storage nodes, their
// clients and mgmtd: targets and chains, each target's state in each of
// its chains and how those states change (Chain's Leave, Return, Restart
// and Synced, which mgmtd applies to its cluster map), one version of all
// of it (Routing), and where it comes from (Provider: mgmtd's watch
// stream, Watch; a file, FileRouting; or by hand, StaticRouting).
//
// It sits below both sides: the storage servers and the client-side
// packages import it, and it imports neither (nor Raft or Pebble).
package routing
