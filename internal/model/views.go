package model

import (
	"cmp"
	"errors"
	"time"
)

// The controller's requests and views as its callers (the API and its
// client) see them; package controller declares them as aliases.

// Errors callers branch on.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request contradicts the object's current state.
	ErrConflict = errors.New("conflict")
)

// Submission is a validated job as the API accepted it.
type Submission struct {
	Name    string
	Project string
	User    string
	Tags    map[string]string
	Spec    JobSpec
	// IdempotencyKey, when set, makes a retried submission return the
	// job the first one created. BodyHash tells retries from reuse.
	IdempotencyKey string
	BodyHash       []byte
	// Audit, when set, is the audit entry of a successful submission: it is
	// chained and committed in the job's own batch, so the submission and
	// its audit record become durable together, with one disk sync.
	Audit *AuditEntry
	// Trusted marks a job an admin submitted (Job.Trusted).
	Trusted bool
}

// JobFilter selects jobs for Jobs.
type JobFilter struct {
	States  []JobState
	Project string
	// Projects, when not nil, selects jobs of these projects only (the
	// projects a caller may see).
	Projects map[string]bool
	// Array, when set, selects the tasks of that array job.
	Array string
	// User and Queue, when set, select the jobs of that submitter or queue.
	User, Queue string
	// Tagged, when set, selects the jobs that carry this tag (any value).
	Tagged string
	// Limit bounds the result to the newest jobs; 0 means 1000.
	Limit int
}

// EventFilter selects events; the zero value selects the most recent 100.
type EventFilter struct {
	Kinds []EventKind
	// Object matches Event.Object exactly, or a job or node id through
	// Event.Job / Event.Node.
	Object string
	Job    string
	Node   string
	// After returns only events with Seq above it (for following).
	After uint64
	Since time.Time
	// Limit caps the result to the last Limit matches (default 100, at
	// most maxEvents).
	Limit int
}

// TokenRequest asks for a new user or agent token.
type TokenRequest struct {
	Kind    TokenKind
	Subject string
	Name    string
	Admin   bool
	TTL     time.Duration
}

// ApplyOptions describe an apply.
type ApplyOptions struct {
	// Author is the subject of the caller's token.
	Author  string
	Message string
	// BaseRevision, when not 0, must be the current revision (the one a
	// plan was made against), or the apply fails with ErrConflict.
	BaseRevision int
	// RollbackOf records the revision whose documents are re-applied.
	RollbackOf int
	// Commit and CommitAuthor record the git commit a GitOps apply comes
	// from (Revision.Commit).
	Commit, CommitAuthor string
}

// ApplyResult is what an apply did.
type ApplyResult struct {
	// Revision is the new revision, or the current one when nothing
	// changed.
	Revision *Revision `json:"revision"`
	// Changed is false when the documents equal the current revision's:
	// no revision is recorded then.
	Changed bool `json:"changed"`
}

// Alert is one rule firing. It is queued in the webhook outbox and kept
// among the recent alerts.
type Alert struct {
	// ID is stable for one alert and period (alertID): a webhook
	// receiver deduplicates by it.
	ID       string    `json:"id"`
	Rule     string    `json:"rule"`
	Severity string    `json:"severity"` // "warning" or "critical"
	At       time.Time `json:"at"`
	Job      string    `json:"job,omitempty"`
	Attempt  string    `json:"attempt,omitempty"`
	Node     string    `json:"node,omitempty"`
	GPU      string    `json:"gpu,omitempty"`
	XID      int       `json:"xid,omitempty"`
	Queue    string    `json:"queue,omitempty"`
	Summary  string    `json:"summary"`
	// Since is when the condition began (idle since).
	Since time.Time `json:"since,omitzero"`
}

// QueueStatus is a queue with what its live attempts hold now.
type QueueStatus struct {
	*Queue
	// Implicit is set for the default queue when no one declared it.
	Implicit bool `json:"implicit,omitempty"`
	// Use is the GPUs live attempts of the queue hold, by GPU model.
	Use map[string]float64 `json:"use"`
	// Pending counts the queue's queued jobs.
	Pending int `json:"pending"`
	// DecayedUsage is the queue's past GPU-hours, decayed for fair share.
	DecayedUsage float64 `json:"decayedGpuHours"`
}

// Explanation is why a job is where it is: for a pending job the last
// pass's verdict (queue position, reasons per node group, queue and offer,
// estimated start), the reservation and the candidates found for it.
type Explanation struct {
	JobID   string   `json:"jobId"`
	State   JobState `json:"state"`
	Reason  string   `json:"reason,omitempty"`
	Queue   string   `json:"queue"`
	Pending bool     `json:"pending"`
	Verdict *Verdict `json:"verdict,omitempty"`
	// Reservations hold GPUs for the job from a predicted start (backfill).
	Reservations []Reservation `json:"reservations,omitempty"`
	// Candidate is new capacity ranked by expected cost to finish.
	Candidate *Candidate `json:"candidate,omitempty"`
	// Preempting lists the attempts being stopped to make room for it.
	Preempting []Preemption `json:"preempting,omitempty"`
	// LaunchBackoffs are offers whose launches failed lately and are not
	// tried again before Until: the one last tried for this job first,
	// then the others, soonest first. New capacity comes from the rest.
	LaunchBackoffs []LaunchBackoff `json:"launchBackoffs,omitempty"`
	// Unavailable are the offers and pool regions providers cannot sell
	// now (no capacity, out of quota), which new capacity skips until
	// each one's Until; at most 10, this job's candidates first.
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	// Placement, for a job that was placed, is why its latest attempt
	// went to its nodes (Attempt.Placement: the data-local scorer's
	// findings).
	Placement []Reason `json:"placement,omitempty"`
}

// LaunchBackoff is one offer in launch back-off.
type LaunchBackoff struct {
	Offer    string    `json:"offer"` // provider/region/zone/instance type/capacity type
	Failures int       `json:"failures"`
	Until    time.Time `json:"until"`
	// ForJob is set on the offer last tried for this job.
	ForJob bool `json:"forJob,omitempty"`
}

// BudgetStatus is a budget with its spend, forecast and state this period.
type BudgetStatus struct {
	Budget Budget `json:"budget"`
	// Webhook names the secret holding the budget's receiver URL, never
	// the URL; empty: the server's default receiver.
	Webhook     string       `json:"webhook,omitempty"`
	PeriodStart time.Time    `json:"periodStart"`
	PeriodEnd   time.Time    `json:"periodEnd"`
	Actual      Money        `json:"actual"`
	Forecast    Money        `json:"forecast"`
	Ratio       float64      `json:"ratio"`
	Fired       []int        `json:"fired"`
	Blocked     bool         `json:"blocked"`
	Daily       []DailyPoint `json:"daily,omitempty"`
	Method      string       `json:"method,omitempty"`
	Note        string       `json:"note,omitempty"`
}

// DailyPoint is one forecast day: its mean and prediction interval.
type DailyPoint struct {
	Day   time.Time `json:"day"`
	Mean  Money     `json:"mean"`
	Lower Money     `json:"lower"`
	Upper Money     `json:"upper"`
}

// PriceOwnedUnpriced marks a node with neither a catalog price nor a row
// in the custom price file (a local or static machine): it is metered at
// $0, so its time still shows in reports, but it costs nothing.
const PriceOwnedUnpriced PriceSource = "owned-unpriced"

// ErrBudget: a budget refuses the request (see cost.Admit); the message
// is the reason.
var ErrBudget = errors.New("refused by budget")

// NodeInfo is a node with what is in use on it.
type NodeInfo struct {
	*Node
	// GPUHolders maps GPU index to the attempt holding it, or to
	// HolderInUse where the caller may not see that attempt (another project's).
	GPUHolders map[int]string `json:"gpuHolders,omitempty"`
	// Holders says, per held GPU, whose attempt holds it.
	Holders map[int]GPUHolder `json:"holders,omitempty"`
	// TelemetrySource is what reads the node's GPUs ("nvml", …,
	// "simulated" for demo GPUs, "none"); Telemetry is its newest sample.
	TelemetrySource string           `json:"telemetrySource,omitempty"`
	Telemetry       *TelemetrySample `json:"telemetry,omitempty"`
	// Billed is what the ledger charges for the node per hour (the custom
	// price file first, then its catalog price) and BilledSource where
	// that price comes from.
	Billed       Money       `json:"billedPerHour"`
	BilledSource PriceSource `json:"billedSource,omitempty"`
}

// HolderInUse stands for an attempt the caller may not see in a node view.
const HolderInUse = "in use"

// GPUHolder is the attempt holding a GPU. Redacted, it says only that the
// GPU is in use: no job, attempt, project or user.
type GPUHolder struct {
	AttemptID string `json:"attemptId,omitempty"`
	JobID     string `json:"jobId,omitempty"`
	Project   string `json:"project,omitempty"`
	User      string `json:"user,omitempty"`
	// InUse is true for every holder; alone it is a redacted one.
	InUse bool `json:"inUse"`
}

// Redacted returns n as a caller sees it who may read the attempts of the
// projects for which visible is true: others' holders become InUse, with
// nothing that names them. n itself is not changed.
func (n NodeInfo) Redacted(visible func(project string) bool) NodeInfo {
	if len(n.Holders) == 0 {
		return n
	}
	out := n
	out.GPUHolders = make(map[int]string, len(n.GPUHolders))
	out.Holders = make(map[int]GPUHolder, len(n.Holders))
	for g, h := range n.Holders {
		if !visible(h.Project) {
			h = GPUHolder{InUse: true}
		}
		out.Holders[g] = h
		out.GPUHolders[g] = cmp.Or(h.AttemptID, HolderInUse)
	}
	return out
}
