// Package mgmtdpb is the generated Go code (committed; see package proto for
// how to regenerate it) of the cluster manager's protocol, sluice.mgmtd.v1:
// the cluster map mgmtd keeps in the metadata Raft group and the commands
// that change it (mgmtd.proto: Node, Target, TargetState, Chain, ChainTable,
// ClusterMap), the gRPC service Mgmtd that storage nodes and clients call
// (service.proto: Register, Heartbeat, ReportSynced, CreateTable,
// GetClusterMap and the WatchClusterMap stream), and its REST/JSON gateway
// (service.pb.gw.go; the HTTP rules are mgmtd/v1/mgmtd_http.yaml).
//
// Nothing here is hand-written but this comment. How the map is read and
// followed is package routing; the service is server/mgmtd.
package mgmtdpb
