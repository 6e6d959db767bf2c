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
	Verdicts Verdicts
	// Wake is the earliest time at which a pass over the same snapshot and
	// offers could decide otherwise through the clock alone: a back-off
	// ending (RetryAt), a nomination expiring, a deadline job's spot risk
	// due for another look (DeadlineRecheck). Zero when no such time is
	// known. What the clock changes and Wake leaves out cannot place, bind
	// or preempt anything the plan did not: aging raises every job of a
	// queue at the same rate (their order holds), decayed usage reorders
	// queues only where they contend for capacity this plan found none of,
	// and reservations' estimated starts and work lost age in the
	// verdicts' text only. A caller may keep such a plan's verdicts until
	// its inputs change or Wake passes (stale but valid).
	Wake time.Time
	// Settled is true when a pass at the same time over the state with
	// every binding of this plan committed, and nothing else changed,
	// would bind and preempt nothing and list the same candidates: the
	// caller may skip that pass (a pass right after a commit usually is
	// one). It is only set where the scheduler can show it (see
	// settled): never for a plan with preemptions.
	Settled bool
}

// Binding places every replica of one job. The controller commits it only if
// the job is still at JobVersion and every GPU it names is still free.
type Binding struct {
	JobID      string
	JobVersion uint64
	Replicas   []Placement
	// Reasons say why the job went where it did, where a scorer has more
	// to say than its score (ScoreData); the controller keeps them on the
	// attempt for explain.
	Reasons []Reason
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
