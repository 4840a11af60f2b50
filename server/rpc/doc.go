// Package rpc is the control plane's gRPC plumbing shared by the meta and
// mgmtd services: the cluster-token check every call must pass, and TLS
// credentials for servers and clients. It owns no service.
package rpc
