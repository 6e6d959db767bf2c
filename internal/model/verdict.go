package model

import (
	"strings"
	"time"
)

// The scheduler's answers about one job, as the controller keeps them and
// the API shows them (package scheduler declares them as aliases).

// Preemption asks a running attempt to stop so others can run. The
// controller stops it through the job's checkpoint signal and grace period
// (the normal drain path) and the attempt ends preempted.
type Preemption struct {
	AttemptID string
	JobID     string
	// AttemptVersion is the attempt version the plan saw.
	AttemptVersion uint64
	// ForJobID is the job the GPUs are freed for.
	ForJobID string
	Reason   string
	// WorkLost is the work since the victim's last checkpoint (or start).
	WorkLost time.Duration
}

// Candidate is new capacity that would let a job run, best first.
type Candidate struct {
	JobID string
	// Instances is how many instances of Offers[0] the job needs.
	Instances int
	Offers    []Offer
	// ExpectedCost is Offers[0]'s expected cost to finish the job in
	// dollars: price × (runtime + expected spot overhead); Costs[i] is
	// that of Offers[i].
	ExpectedCost float64
	Costs        []float64
	// RuntimeAssumed is set when the job had no runtime estimate or limit
	// and DefaultRuntime was assumed.
	RuntimeAssumed bool
}

// Reservation holds GPUs for a blocked job from Start (EASY backfill): a
// later job may use them only if its runtime estimate ends it by Start.
type Reservation struct {
	JobID  string
	NodeID string
	GPUs   []int
	Start  time.Time
}

// Verdict is why a pending job was not bound in this pass.
type Verdict struct {
	// Queue is the queue the job waits in; Position its place in that
	// queue's order this pass, from 1.
	Queue    string   `json:"queue,omitempty"`
	Position int      `json:"position"`
	Reasons  []Reason `json:"reasons"`
	// EstimatedStart is set when a reservation predicts one.
	EstimatedStart *time.Time `json:"estimatedStart,omitempty"`
	// RetryAt is set while the job backs off after a failed attempt: it is
	// not placed before then (ReasonBackoff).
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// Reason is one verdict line, scoped to what it is about: "job", a node
// ("node/<id>") or an offer ("offer").
type Reason struct {
	Scope string `json:"scope"`
	// Code names the check that failed, for tools and tests (the Filter*
	// constants for node filters); empty on reasons not yet coded.
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// String is the reason as explain prints it: its scope, then its message.
func (r Reason) String() string { return r.Scope + " " + r.Message }

// Summary is the verdict in one line, for lists (`jobs list`) and for
// `run --follow` while the job waits: the first job-wide reason (the job
// itself, its project or queue), else the first reason, with its scope.
func (v Verdict) Summary() string {
	if len(v.Reasons) == 0 {
		return ""
	}
	r := v.Reasons[0]
	for _, x := range v.Reasons {
		if x.Scope == "job" || strings.HasPrefix(x.Scope, "project/") || strings.HasPrefix(x.Scope, "queue/") {
			r = x
			break
		}
	}
	if r.Scope == "job" {
		return r.Message
	}
	return r.Scope + ": " + r.Message
}
