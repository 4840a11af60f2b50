// Package openapi owns the OpenAPI (Swagger 2) documents of the REST API,
// generated beside the services (`go generate ./proto/`) and committed, and
// the one document a meta replica serves at /openapi.json: the meta and
// mgmtd services' documents merged. It builds nothing by hand; a path or
// definition the two documents share must be the same in both.
package openapi
