package api

import (
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"time"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// JobManifest is the body of a job submission (DESIGN.md §2).
type JobManifest = manifest.Job

// JobView is a job as the API shows it.
type JobView struct {
	*model.Job
	// AttemptDetails lists every attempt, oldest first.
	AttemptDetails []*model.Attempt `json:"attemptDetails,omitempty"`
	// Pending explains why a queued job waits.
	Pending *model.Verdict `json:"pending,omitempty"`
	// Array is set when the id names an array job: Job then summarises the
	// array (its id, spec, submission and a state derived from its tasks;
	// see ArrayState) and Array lists the tasks.
	Array *ArrayView `json:"array,omitempty"`
	// Efficiency judges how the live attempt uses its GPUs, with its
	// allocated and effective cost; absent without telemetry.
	Efficiency *efficiency.Report `json:"efficiency,omitempty"`
	// Cost is the job's metered cost across all its attempts; absent
	// before its first metered second.
	Cost *JobCostView `json:"cost,omitempty"`
}

// AlertList is the recent alerts, oldest first.
type AlertList struct {
	Items []model.Alert `json:"items"`
}

// ArrayView is an array job's tasks and how many are in each state.
type ArrayView struct {
	Size   int                    `json:"size"`
	States map[model.JobState]int `json:"states"`
	Tasks  []*model.Job           `json:"tasks"`
}

// CheckpointReport is the optional body of POST /v1/jobs/{id}/checkpoints.
type CheckpointReport struct {
	// Step is the job's own progress counter, for its logs; the server
	// records the time it received the report.
	Step int64 `json:"step,omitempty"`
}

// JobList is the body of GET /v1/jobs.
type JobList struct {
	Jobs []*model.Job `json:"jobs"`
	// Total counts the matches before offset and limit (paged lists,
	// ?offset= or ?q=, only).
	Total int `json:"total,omitempty"`
	// Summaries has each listed job's cost and efficiency, by id
	// (?summary=true only).
	Summaries map[string]JobSummary `json:"summaries,omitempty"`
}

// ArrayState derives an array job's state from its tasks: queued until a
// task starts, running while any task is unfinished, and once all ended
// succeeded if every task did, else cancelled if any was cancelled and
// none failed, else failed.
func ArrayState(tasks []*model.Job) model.JobState {
	var started, unfinished, failed, cancelled bool
	for _, t := range tasks {
		switch {
		case !t.State.Terminal():
			unfinished = true
			started = started || t.State != model.JobQueued
		case t.State == model.JobCancelled:
			cancelled = true
		case t.State != model.JobSucceeded:
			failed = true
		}
	}
	switch {
	case unfinished && started:
		return model.JobRunning
	case unfinished:
		return model.JobQueued
	case failed:
		return model.JobFailed
	case cancelled:
		return model.JobCancelled
	}
	return model.JobSucceeded
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []model.NodeInfo `json:"nodes"`
}

// OfferList is the body of GET /v1/offers.
type OfferList struct {
	Offers []model.Offer `json:"offers"`
	// Total counts the offers that match across pages (?offset=, ?limit=).
	Total int `json:"total"`
}

// VersionInfo describes the server.
type VersionInfo struct {
	Version    string `json:"version"`
	GoVersion  string `json:"goVersion"`
	APIVersion string `json:"apiVersion"`
}

// TokenCreate asks for a token.
type TokenCreate struct {
	// Kind is user or agent.
	Kind model.TokenKind `json:"kind"`
	// Subject is the user name or node id the token speaks for.
	Subject string         `json:"subject"`
	Name    string         `json:"name,omitempty"`
	Admin   bool           `json:"admin,omitempty"`
	TTL     model.Duration `json:"ttl"`
}

// TokenCreated carries the secret, shown only once.
type TokenCreated struct {
	Token  *model.Token `json:"token"`
	Secret string       `json:"secret"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []*model.Token `json:"tokens"`
}

// maxTokenTTL bounds tokens created through the API.
const maxTokenTTL = 366 * 24 * time.Hour

// maxTokenNameLen bounds a token's label, in bytes.
const maxTokenNameLen = 253
