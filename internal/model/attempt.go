package model

import (
	"fmt"
	"time"
)

// AttemptState is where one try at running a job is.
type AttemptState string

// Attempt states. Starting and Running are live; the rest are final.
const (
	AttemptStarting  AttemptState = "starting"
	AttemptRunning   AttemptState = "running"
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptCancelled AttemptState = "cancelled"
	AttemptPreempted AttemptState = "preempted"
	AttemptLost      AttemptState = "lost"
	// AttemptStoppedEarly: an early-stop policy stopped the run; the job
	// ends stopped-early.
	AttemptStoppedEarly AttemptState = "stopped-early"
)

// Terminal reports whether s is a final state.
func (s AttemptState) Terminal() bool { return s != AttemptStarting && s != AttemptRunning }

// Reasons an attempt or job ended, recorded in Reason fields.
const (
	ReasonRuntimeLimit = "runtime limit exceeded"
	ReasonCancelled    = "cancelled by user"
	ReasonLost         = "process gone without an exit record"
	ReasonNodeLost     = "node lost"
)

// Attempt is one try at running a job: its replicas bound to GPUs on nodes.
// Treat a published *Attempt as immutable.
type Attempt struct {
	ID       string       `json:"id"`
	JobID    string       `json:"jobId"`
	Number   int          `json:"number"`
	Replicas []Replica    `json:"replicas"`
	State    AttemptState `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	ExitCode *int         `json:"exitCode,omitempty"`

	// Stop asks the agents to stop the replicas with the job's checkpoint
	// signal and grace period; StopState is the state the attempt ends in.
	Stop      bool         `json:"stop,omitempty"`
	StopState AttemptState `json:"stopState,omitempty"`
	StopWhy   string       `json:"stopWhy,omitempty"`

	// Placement says why the scheduler chose the attempt's nodes where a
	// scorer had more to say than a number (data locality: which
	// datasets each node already held); explain shows it.
	Placement []Reason `json:"placement,omitempty"`

	CreatedAt time.Time  `json:"createdAt"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	Version   uint64     `json:"version"`
}

// AttemptID names attempt n of a job.
func AttemptID(jobID string, n int) string { return fmt.Sprintf("%s-a%d", jobID, n) }

// Clone returns a deep copy.
func (a *Attempt) Clone() *Attempt {
	c := *a
	c.Replicas = make([]Replica, len(a.Replicas))
	for i, r := range a.Replicas {
		c.Replicas[i] = r.clone()
	}
	if a.ExitCode != nil {
		v := *a.ExitCode
		c.ExitCode = &v
	}
	return &c
}

// Replica is one rank of an attempt on one node.
type Replica struct {
	Rank   int    `json:"rank"`
	NodeID string `json:"nodeId"`
	GPUs   []int  `json:"gpus"`
	// GPUShare, when above 0, is the fraction of its one GPU the replica
	// holds on a node whose GPUs are shared.
	GPUShare float64      `json:"gpuShare,omitempty"`
	State    AttemptState `json:"state"`
	ExitCode *int         `json:"exitCode,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	// Endpoint is host:port where a service's replica is reached, when
	// its runner says (a Kubernetes Service); empty: its node's address.
	Endpoint string `json:"endpoint,omitempty"`
	// EndedAt is when the replica ended as its agent reported it, bounded
	// by what the server saw (not before the attempt started, not after
	// the report arrived); nil while running or when the server ended it.
	EndedAt *time.Time `json:"endedAt,omitempty"`
	// NeverStarted: the replica was lost before its command ran, refused
	// by its supervisor because its node's fence had passed
	// (agentapi.ReplicaStatus.NeverStarted).
	NeverStarted bool `json:"neverStarted,omitempty"`
}

func (r Replica) clone() Replica {
	r.GPUs = append([]int(nil), r.GPUs...)
	if r.ExitCode != nil {
		v := *r.ExitCode
		r.ExitCode = &v
	}
	if r.EndedAt != nil {
		v := *r.EndedAt
		r.EndedAt = &v
	}
	return r
}

// ReplicaID names rank r of an attempt, as agents see it.
func ReplicaID(attemptID string, rank int) string { return fmt.Sprintf("%s-r%d", attemptID, rank) }
