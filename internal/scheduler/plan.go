package scheduler

import (
	"github.com/gpufleet/gpufleet/internal/model"
)

// Plan is the scheduler's decision for one pass (DESIGN.md §3).
type Plan struct {
	// SnapshotVersion is the state version the plan was computed on.
	SnapshotVersion uint64
	Bindings        []Binding
	Preemptions     []Preemption
	// Candidates rank offers for jobs that fit on no existing node, so the
	// autoscaler can buy capacity for them.
	Candidates   []Candidate
	Reservations []Reservation
	// Verdicts explain, for every pending job not bound, why not.
	Verdicts map[string]Verdict
}

// Binding places every replica of one job. The controller commits it only if
// the job is still at JobVersion and every GPU it names is still free.
type Binding struct {
	JobID      string
	JobVersion uint64
	Replicas   []Placement
}

// Placement is one replica on one node.
type Placement struct {
	Rank   int
	NodeID string
	GPUs   []int
	// Share, when above 0, is the fraction of its one shared GPU the
	// replica takes.
	Share float64
}

// The plan's per-job answers live in package model, so the API and its
// client show them without importing the scheduler.
type (
	Preemption  = model.Preemption
	Candidate   = model.Candidate
	Reservation = model.Reservation
	Verdict     = model.Verdict
	Reason      = model.Reason
)
