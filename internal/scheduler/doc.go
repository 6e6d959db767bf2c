// Package scheduler decides where pending jobs run. It is pure: Schedule reads
// an immutable state.Snapshot and the offers that could be bought, and returns
// a Plan; it does no I/O, reads no clock and starts no goroutines. The same
// snapshot, offers, time and seed always give the same Plan.
//
// This is the first scheduler: jobs are taken in acceptance order (FIFO) and
// each is placed all-or-nothing on the first ready nodes whose free GPUs match
// its count, model and memory; a job that does not fit does not block the
// jobs behind it. Jobs that fit on no node get ranked offers as candidates for
// new capacity. "Does not fit" is a verdict with reasons, never an error.
//
// Invariants of every Plan: no GPU is bound twice, a job's replicas are bound
// together or not at all, and a job is bound at most once.
package scheduler
