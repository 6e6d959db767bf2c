package scheduler

import (
	"time"

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
}

// Preemption asks a running attempt to stop so others can run.
type Preemption struct {
	AttemptID string
	JobID     string
	// ForJobID is the job the GPUs are freed for.
	ForJobID string
	Reason   string
}

// Candidate is new capacity that would let a job run, best first.
type Candidate struct {
	JobID string
	// Instances is how many instances of Offers[0] the job needs.
	Instances int
	Offers    []model.Offer
}

// Reservation holds GPUs for a blocked job from Start (backfill).
type Reservation struct {
	JobID  string
	NodeID string
	GPUs   []int
	Start  time.Time
}

// Verdict is why a pending job was not bound in this pass.
type Verdict struct {
	// Position is the job's place among pending jobs, from 1.
	Position int      `json:"position"`
	Reasons  []Reason `json:"reasons"`
	// EstimatedStart is set when a reservation predicts one.
	EstimatedStart *time.Time `json:"estimatedStart,omitempty"`
}

// Reason is one verdict line, scoped to what it is about: "job", a node
// ("node/<id>") or an offer ("offer").
type Reason struct {
	Scope   string `json:"scope"`
	Message string `json:"message"`
}
