// Package rpc is the control plane's gRPC plumbing shared by clients and
// servers: TLS credentials for servers and clients, and the client side's
// connection to a group of replicas that follows its leader (LeaderConn).
// The cluster token lives in package auth. It owns no service.
package rpc
