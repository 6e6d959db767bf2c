package manifest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// KindNotification declares where job, budget and alert events are posted
// (docs/notifications.md).
const KindNotification = "Notification"

// Notification events: what a Notification document may subscribe to.
const (
	EventSucceeded   = "succeeded"    // a job ended succeeded
	EventFailed      = "failed"       // a job ended failed
	EventPreempted   = "preempted"    // an attempt was preempted or lost (the job may be requeued)
	EventStuckQueued = "stuck-queued" // a job waited queued longer than spec.stuckAfter
	EventBudget      = "budget"       // a budget threshold fired
	EventAlert       = "alert"        // an alert rule fired
)

// NotificationEvents lists every event, in the order docs show them.
var NotificationEvents = []string{EventSucceeded, EventFailed, EventPreempted, EventStuckQueued, EventBudget, EventAlert}

// Notification payload formats.
const (
	FormatJSON  = "json"  // gpufleet's own JSON body (the default)
	FormatSlack = "slack" // a Slack incoming-webhook message (blocks)
	FormatTeams = "teams" // a Microsoft Teams incoming-webhook MessageCard
)

// NotificationFormats lists every format.
var NotificationFormats = []string{FormatJSON, FormatSlack, FormatTeams}

// Notification is a manifest of kind Notification.
type Notification struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   ObjectMeta       `json:"metadata"`
	Spec       NotificationSpec `json:"spec"`
}

// NotificationSpec says which events of which jobs are posted where, and in
// which format.
type NotificationSpec struct {
	// Scope selects jobs by project, queue and tags (every field set must
	// match); empty matches every job. Budget firings match by the
	// budget's project; alerts by their job's project, queue and tags (an
	// alert about no job matches a scope naming no project or tags, and
	// a queue alert a scope naming its queue or none).
	Scope  model.BudgetScope `json:"scope,omitempty"`
	Events []string          `json:"events"`
	// StuckAfter is how long a job waits queued before stuck-queued
	// fires (once per time it enters the queue). Required with that
	// event.
	StuckAfter model.Duration `json:"stuckAfter,omitempty"`
	// Receiver names the sealed secret holding the receiver's URL (and
	// optionally its signing key), as a Budget's webhook does.
	Receiver *WebhookRef `json:"receiver"`
	// Format is json (default), slack or teams.
	Format string `json:"format,omitempty"`
}

// Wants reports whether s subscribes to event.
func (s *NotificationSpec) Wants(event string) bool { return slices.Contains(s.Events, event) }

// FormatOrDefault is the format, json when unset.
func (s *NotificationSpec) FormatOrDefault() string {
	if s.Format == "" {
		return FormatJSON
	}
	return s.Format
}

// Validate reports every problem in d.
func (d *Notification) Validate(func(string) bool) model.FieldErrors {
	fe := validateObject(d.APIVersion, d.Kind, KindNotification, d.Metadata)
	s := &d.Spec
	if len(s.Events) == 0 {
		fe.Add("spec.events", "is required: one or more of "+strings.Join(NotificationEvents, ", "))
	}
	seen := map[string]bool{}
	for i, e := range s.Events {
		p := fmt.Sprintf("spec.events[%d]", i)
		switch {
		case !slices.Contains(NotificationEvents, e):
			fe.Add(p, "must be one of "+strings.Join(NotificationEvents, ", ")+got(e))
		case seen[e]:
			fe.Add(p, fmt.Sprintf("%q is listed twice", e))
		}
		seen[e] = true
	}
	switch {
	case seen[EventStuckQueued] && s.StuckAfter <= 0:
		fe.Add("spec.stuckAfter", "is required with the stuck-queued event: how long a job may wait queued (e.g. 30m)")
	case s.StuckAfter < 0:
		fe.Add("spec.stuckAfter", "must not be negative")
	case s.StuckAfter > 0 && s.StuckAfter.D() < time.Minute:
		fe.Add("spec.stuckAfter", "must be at least 1m")
	case s.StuckAfter > 0 && !seen[EventStuckQueued]:
		fe.Add("spec.stuckAfter", "is only used with the stuck-queued event; add it to spec.events or remove this field")
	}
	if s.Format != "" && !slices.Contains(NotificationFormats, s.Format) {
		fe.Add("spec.format", "must be one of "+strings.Join(NotificationFormats, ", ")+got(s.Format))
	}
	if s.Scope.Project != "" && !isDNSLabel(s.Scope.Project) {
		fe.Add("spec.scope.project", dnsLabelRule)
	}
	if s.Receiver == nil {
		fe.Add("spec.receiver", "is required: {secretRef: PROJECT/NAME}, the sealed secret holding the receiver's URL "+
			"(printf %s \"$URL\" | gpufleet secrets set PROJECT NAME)")
	} else {
		fe = append(fe, s.Receiver.Validate("spec.receiver")...)
	}
	return fe
}
