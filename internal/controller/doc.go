// Package controller is gpufleet's control loop and the owner of its
// in-memory state (DESIGN.md §1, §3). It accepts jobs, takes snapshots, calls
// the pure scheduler, commits the plan's bindings where the jobs and GPUs they
// touch are unchanged since the snapshot, serves agents their desired
// replicas, and turns what agents report into attempt and job transitions.
//
// Every change follows one path: under the controller's mutex the change is
// checked against the current state, applied to memory and queued to the
// store; the caller then waits until the store has made it durable. Batches
// become durable in the order they were queued, so the disk always holds a
// prefix of the changes memory has seen, and nothing is shown to an agent
// before it is durable. A store failure stops the controller: memory would
// otherwise be ahead of the truth on disk.
package controller
