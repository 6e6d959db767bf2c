package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// maxEvents bounds the events kept in memory for the API; the store keeps
// them all.
const maxEvents = store.MaxLoadedEvents

// recordLocked numbers ev, keeps it in memory and appends it to b, the
// batch of the change it describes, so the event is durable exactly when
// the change is. Callers hold c.mu.
func (c *Controller) recordLocked(b *store.Batch, ev model.Event) *model.Event {
	c.eventSeq++
	ev.Seq = c.eventSeq
	// Messages may quote errors that echo a secret; scrub them before
	// they are kept or stored.
	ev.Message = c.cfg.Redactor.Scrub(ev.Message)
	for k, v := range ev.Fields {
		ev.Fields[k] = c.cfg.Redactor.Scrub(v)
	}
	if ev.Time.IsZero() {
		ev.Time = c.cfg.Clock.Now()
	}
	e := &ev
	c.events = append(c.events, e)
	if len(c.events) > maxEvents+maxEvents/4 {
		c.events = append([]*model.Event(nil), c.events[len(c.events)-maxEvents:]...)
	}
	b.Events = append(b.Events, e)
	c.cfg.Metrics.event(ev.Kind)
	return e
}

// EventFilter is model.EventFilter, declared there so the API and its client
// need not import the controller.
type EventFilter = model.EventFilter

// Events returns the matching events in Seq order.
func (c *Controller) Events(f EventFilter) []model.Event {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Limit > maxEvents {
		f.Limit = maxEvents
	}
	kinds := map[model.EventKind]bool{}
	for _, k := range f.Kinds {
		kinds[k] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := sort.Search(len(c.events), func(i int) bool { return c.events[i].Seq > f.After })
	var out []model.Event
	for i := len(c.events) - 1; i >= start && len(out) < f.Limit; i-- {
		e := c.events[i]
		switch {
		case len(kinds) > 0 && !kinds[e.Kind]:
		case f.Object != "" && e.Object != f.Object && e.Job != f.Object && e.Node != f.Object && !strings.HasSuffix(e.Object, "/"+f.Object):
		case f.Job != "" && e.Job != f.Job:
		case f.Node != "" && e.Node != f.Node:
		case !f.Since.IsZero() && e.Time.Before(f.Since):
		default:
			out = append(out, *e)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// RecordEvent commits one event on its own, for changes made outside the
// controller's batches (the API injecting a notice by hand).
func (c *Controller) RecordEvent(ctx context.Context, ev model.Event) error {
	c.mu.Lock()
	b := &store.Batch{}
	c.recordLocked(b, ev)
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return fmt.Errorf("recording event: %w", err)
	}
	return nil
}

// attemptEventLocked records how an attempt ended and, when the job goes
// back to the queue, its requeue.
func (c *Controller) attemptEventLocked(b *store.Batch, j *model.Job, a *model.Attempt, requeued bool) {
	kind := model.EventAttemptEnd
	if a.State == model.AttemptPreempted || a.State == model.AttemptLost {
		kind = model.EventPreempted
	}
	node := ""
	if len(a.Replicas) > 0 {
		node = a.Replicas[0].NodeID
	}
	msg := fmt.Sprintf("attempt %d ended %s", a.Number, a.State)
	if a.Reason != "" {
		msg += ": " + a.Reason
	}
	c.recordLocked(b, model.Event{Kind: kind, Object: "job/" + j.ID, Job: j.ID, Node: node, Attempt: a.Number, Message: msg,
		Fields: map[string]string{"state": string(a.State)}})
	if requeued {
		msg := fmt.Sprintf("requeued after attempt %d (preemptions %d, failures %d)", a.Number, j.Preemptions, j.Failures)
		fields := map[string]string{"preemptions": fmt.Sprint(j.Preemptions), "failures": fmt.Sprint(j.Failures)}
		if j.RetryAt != nil {
			msg += "; next try at " + j.RetryAt.UTC().Format(time.RFC3339)
			fields["retry_at"] = j.RetryAt.UTC().Format(time.RFC3339)
		}
		c.recordLocked(b, model.Event{Kind: model.EventRequeue, Object: "job/" + j.ID, Job: j.ID, Attempt: a.Number,
			Message: msg, Fields: fields})
	}
}
