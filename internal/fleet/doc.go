// Package fleet compares declared fleets: Plan diffs the current revision's
// documents (NodePool, Queue, Project) against desired ones and prices the
// pools from the catalog; Drift compares the declared pools and queues with
// the nodes, provider instances and queues that exist.
//
// Invariants:
//   - Both are pure: no I/O, no clock, no goroutines; equal inputs give
//     equal, deterministically ordered outputs.
//   - Costs are USD-per-hour estimates (floats), never ledger money; the
//     pricing rule is PoolCost's.
//   - Plan's field paths are the manifest's ("spec.max",
//     `spec.quota["H100"].nominal`), so a user finds the line to edit.
package fleet
