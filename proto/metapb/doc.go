// Package metapb is the generated Go code (committed; see package proto for
// how to regenerate it) of the metadata service's protocol,
// sluice.meta.v1: the namespace records the meta state machine keeps and
// replicates through Raft (meta.proto: Inode, DirEntry, Layout, Command and
// its operations), the gRPC service Meta that clients call (service.proto:
// stat, list, create, rename, sessions, read leases, statfs, membership),
// and its REST/JSON gateway (service.pb.gw.go; the HTTP rules are
// meta/v1/meta_http.yaml).
//
// Nothing here is hand-written but this comment. The rules a client must
// follow (names, chunk placement, errors) are in package fsmeta; the
// service is server/meta.
package metapb
