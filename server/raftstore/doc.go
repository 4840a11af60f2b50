// Package raftstore keeps hashicorp/raft's log and stable state in Pebble,
// for the Raft group that replicates Sluice's cluster map and namespace.
//
// One Pebble database holds both: log entries under "l" + big-endian index
// (so they sort by index and a range delete compacts a prefix), stable
// values under "s" + key. Log appends are synced: an entry Raft counts as
// persisted must survive power loss, or a restarted voter could vote and
// acknowledge against a log it no longer has. Stable values (current term,
// last vote) are synced for the same reason. Prefix deletions after a
// snapshot are synced too, so a restart never finds a gap between the
// snapshot and the log.
//
// hashicorp/raft recognises a missing stable key by the error text "not
// found"; ErrKeyNotFound has exactly that text.
package raftstore
