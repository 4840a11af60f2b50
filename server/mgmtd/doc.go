// Package mgmtd owns the cluster map: storage nodes, their targets and the
// targets' states, chains and chain tables, and how they change when
// targets fail and return. The map lives in the metadata Raft group (the
// meta package's state machine applies mgmtd commands through ClusterMap);
// the Detector runs on the group's leader and turns heartbeats, kept as
// leases in memory, into those commands.
//
// Target states and their transitions:
//
//	from      to        when
//	serving   offline   its lease lapses: it leaves its chains, their versions go up
//	syncing   offline   its lease lapses while catching up
//	offline   syncing   it heartbeats again: it rejoins its chains at the end
//	syncing   serving   its predecessor in every one of its chains reports it in sync
//
// Every change bumps the map's version and the version of each chain it
// touches, so storage nodes refuse requests routed with the old chains.
package mgmtd
