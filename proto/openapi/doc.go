// Package openapi owns the OpenAPI (Swagger 2) documents of the REST API,
// generated beside the services (`go generate ./proto/`) and committed, and
// the one document a meta replica serves at /openapi.json: the meta and
// mgmtd services' documents merged (Document). It writes no part of a
// document by hand but the title; a definition both documents have must
// have the same shape in both (their descriptions may differ).
package openapi
