// Package mgmtd owns the cluster map: storage nodes, their targets and the
// targets' states, chains and chain tables, and how they change when
// targets fail and return. The map lives in the metadata Raft group (the
// meta package's state machine applies mgmtd commands through ClusterMap);
// the Detector runs on the group's leader and turns heartbeats, kept as
// leases in memory, into those commands.
//
// A target's state is per chain (Chain.states, parallel to its targets),
// and the target's own state sums them up: offline while its lease has
// lapsed, else syncing if it catches up in any chain, else serving.
// Transitions in one chain (routing.Chain's Leave, Return, Restart, Synced):
//
//	from      to                    when
//	serving   (leaves the chain)    its lease lapses, and another replica serves
//	serving   offline (kept)        its lease lapses, and it is the last serving
//	                                replica: the chain waits for it (as in 3FS)
//	syncing   (leaves the chain)    its lease lapses while catching up
//	offline   serving               a kept replica heartbeats again
//	(none)    syncing, at the end   an offline target heartbeats again
//	serving   syncing, at the end   it registers again within its lease (it was
//	                                restarted), unless it is the only serving one
//	syncing   serving               its predecessor reports it in sync at the
//	                                chain's current version
//
// Every change bumps the map's version and the version of each chain it
// touches, so storage nodes refuse requests routed with the old chains.
// Heartbeats renew a node's lease and report its disks; a target with less
// than FullBelow free is marked full in the map (writes to its chains fail
// fast) until it has twice that.
//
// Place (placement.go) lays out a chain table when it is created: no two
// replicas of a chain in one failure domain (a node, or the rack its
// storage node registered), every target its share of replicas, the
// chains a node shares with each other node as few and as even as the
// numbers allow, and each chain's order chosen so every node heads its
// share and, when a node is replaced, each other node resyncs about as
// many of its chains (a chain is resent by the last member before the
// replacement, which rejoins at the tail). It runs inside the state
// machine, so it is deterministic; it never moves the chains of a table
// that exists. A replacement stays at the tails of its chains, so the
// next node replaced after it is resynced less evenly.
package mgmtd
