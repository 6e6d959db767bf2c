// Package state is the controller's in-memory model of the fleet: jobs,
// attempts, nodes and which GPUs each live attempt holds, with the indexes
// the scheduler reads (pending jobs in order, free GPUs per node).
//
// State is not safe for concurrent use: the controller owns it and guards it
// with one mutex. Snapshot returns an immutable view that the pure scheduler
// reads without locks. Objects are never mutated in place — a change stores
// a new copy with a higher Version — so a Snapshot can share them.
//
// Invariants: a GPU is held by at most one live attempt; a job has at most one
// live attempt; a job is pending exactly when its state is queued.
package state
