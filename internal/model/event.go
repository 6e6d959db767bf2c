package model

import "time"

// EventKind names what happened (issue 4, item 7).
type EventKind string

// Event kinds. Every launch, failure, failover, preemption notice, drain,
// requeue and termination is one event.
const (
	EventLaunch     EventKind = "launch"        // an instance was bought (node launching)
	EventNodeReady  EventKind = "node-ready"    // a launched instance is running
	EventLaunchFail EventKind = "launch-failed" // a launch was refused or timed out
	EventFailover   EventKind = "failover"      // the next offer is tried after a failure
	EventNotice     EventKind = "notice"        // a spot/preemption notice for a node
	EventDrain      EventKind = "drain"         // a node stops taking work
	EventPreempted  EventKind = "preempted"     // an attempt ended preempted
	EventAttemptEnd EventKind = "attempt-end"   // an attempt ended (any other state)
	EventRequeue    EventKind = "requeue"       // a job returned to the queue
	EventNodeLost   EventKind = "node-lost"     // a node went silent
	EventTerminate  EventKind = "terminate"     // an instance was terminated (idle, drained, interrupted)
	EventLeak       EventKind = "leak"          // an instance the store does not own was found and terminated
	// EventServiceScale: a service's autoscaler changed its replica count.
	EventServiceScale EventKind = "service-scale"
)

// Event is one thing the control plane did or saw, recorded in the same
// store batch as the change it describes. Seq numbers events from 1 in the
// order they reached memory.
type Event struct {
	Seq      uint64            `json:"seq"`
	Time     time.Time         `json:"time"`
	Kind     EventKind         `json:"kind"`
	Object   string            `json:"object"` // "job/<id>", "node/<id>", "instance/<provider>/<id>"
	Node     string            `json:"node,omitempty"`
	Job      string            `json:"job,omitempty"`
	Attempt  int               `json:"attempt,omitempty"`
	Provider string            `json:"provider,omitempty"`
	Region   string            `json:"region,omitempty"`
	Message  string            `json:"message"`
	Fields   map[string]string `json:"fields,omitempty"`
}
