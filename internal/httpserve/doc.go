// Package httpserve owns the HTTP side every Sluice process serves on its
// --http address: /metrics (Prometheus text format), /healthz (the process
// is alive), /readyz (it is serving, by the process's own test), and, where
// the process has them, a REST API under /v1/ and its OpenAPI document at
// /openapi.json. It knows nothing of Sluice's services: commands hand it a
// gatherer, a readiness test, an API handler and a way to check the token.
// It must never serve anything without a Close that stops it.
package httpserve
