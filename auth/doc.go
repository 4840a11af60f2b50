// Package auth is the cluster token and what is derived from it: loading
// (or making) the token file, the fabric secret every data-plane peer
// shares, the gRPC check every control-plane call must pass (TokenAuth),
// and the per-RPC credentials clients send it with (Credentials).
package auth
