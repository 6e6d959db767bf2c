// Package api serves gpufleet's HTTP API under /v1: JSON bodies, errors as
// application/problem+json with a field path for every invalid field, bearer
// tokens on every route but /healthz and /readyz, and an OpenAPI 3 document
// generated from the same route table that builds the mux — so the document,
// the permission declarations and the routes cannot drift apart.
//
// Each route declares, in one table (routes.go), the permission it needs and
// which token kinds may hold it. A route cannot be served without a
// declaration: the mux is built from the table.
//
// The API reaches the control plane only through the small interfaces in
// backend.go (Backend gathers the scheduling state's, which internal/server
// serves from the controller; Identity, Roles, Auditor and Secrets come
// from the controller's components, which keep their own locks) and speaks in
// wire types from this package and model, so it and its client import
// neither the controller nor the scheduler (TestDependencyDirections).
package api
