// Package rpc is the control plane's gRPC plumbing shared by the meta and
// mgmtd services: the cluster-token check every call must pass, TLS
// credentials for servers and clients, and the client side's connection to
// a group of replicas that follows its leader (LeaderConn). It owns no
// service.
package rpc
