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
//	(none)    syncing, at the end   a replica move starts (MoveReplica): the
//	                                new target joins to replace move.from
//	syncing   (leaves the chain)    it is move.to and its lease lapses: the
//	                                move is cancelled, move.from stays
//	any       leaving (serving on)  it is move.from and move.to now serves:
//	                                the move is done (moves_done goes up)
//	leaving   (leaves the chain)    the chain has its table's replicas
//	                                serving besides the leaving ones, or it
//	                                no longer serves there (it died)
//
// A replica move (move.go) is the one way a chain's membership changes on
// purpose: drain, replacing a dead node and rebalance are all moves. The
// chain has one replica more while it runs and never fewer after: the
// replaced replica leaves only once its replacement serves and the chain
// is full without it (a chain that lost another replica meanwhile keeps
// it, serving, until that one is back or replaced; settleLeaving runs
// after every command). If the replaced one dies first it leaves as any
// dead replica does while the move goes on from the others. A move's new
// target is live, neither draining nor full, and in none of the chain's
// failure domains but the replaced and leaving ones' (within a rack is
// how a chain moves when racks are as many as replicas). At most one move
// runs per chain at a time.
//
// Drain (SetDraining) marks targets in the map; the Planner, on the leader
// like the Detector, proposes moves for every chain of a draining target
// (the least loaded eligible target first) and, while the map's rebalance
// flag is on, from the targets holding the most chains to those holding
// the fewest until every live one is within one of the mean, then turns
// the flag off. Both are throttled (PlannerConfig: moves in flight in all
// and per target). The goals live in the map, so a new leader carries on.
// A drained target (draining, in no chain) can be retired
// (RetireTargets): it and its node, if left with none, leave the map.
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
// that exists (replica moves do). A replacement stays at the tails of its
// chains, so the next node replaced after it is resynced less evenly.
package mgmtd
