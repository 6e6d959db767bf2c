package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/notifications"
	"github.com/gpufleet/gpufleet/internal/store"
)

// notifyLocked queues, in b, what the fleet's Notification documents ask
// for ev (package notifications). b is the batch of the change ev
// describes, so a notification is durable exactly when its cause is.
// Only, when given, limits it to the documents so named. Callers hold c.mu
// and commit b.
func (c *Controller) notifyLocked(b *store.Batch, ev notifications.Event, only ...string) {
	if c.fleet.set == nil || len(c.fleet.set.Notifications) == 0 {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = c.cfg.Clock.Now()
	}
	for _, d := range notifications.Render(c.fleet.set.Notifications, ev) {
		if len(only) > 0 && !slices.Contains(only, d.Notification) {
			continue
		}
		c.queueNotificationLocked(&store.Notification{ID: d.ID, Kind: notifications.Kind, URLRef: d.URLRef, KeyRef: d.KeyRef,
			Body: d.Body, NextAt: ev.Time, Created: ev.Time}, b)
	}
}

// jobEvent describes job j for a notification of kind.
func jobEvent(kind string, j *model.Job, id, title, text string, now time.Time, facts ...notifications.Fact) notifications.Event {
	return notifications.Event{ID: id, Kind: kind, Time: now, Job: j.ID, Project: j.Project, Queue: j.Spec.Queue, Tags: j.Tags,
		Title: title, Text: text, Facts: facts}
}

// notifyAttemptLocked notifies how attempt a of job j (as it is now)
// ended: preempted (or lost), and the job's end when it ended.
func (c *Controller) notifyAttemptLocked(b *store.Batch, j *model.Job, a *model.Attempt, now time.Time) {
	base := fmt.Sprintf("job/%s/attempt/%d/", j.ID, a.Number)
	attempt := notifications.Fact{Name: "Attempt", Value: fmt.Sprint(a.Number)}
	if (a.State == model.AttemptPreempted || a.State == model.AttemptLost) && j.State != model.JobCancelled {
		text := a.Reason
		if j.State == model.JobQueued {
			text = strings.TrimPrefix(text+"; requeued", "; ")
		}
		c.notifyLocked(b, jobEvent(manifest.EventPreempted, j, base+manifest.EventPreempted,
			fmt.Sprintf("Job %s was interrupted (%s)", j.ID, a.State), text, now, attempt))
	}
	switch j.State {
	case model.JobSucceeded:
		c.notifyLocked(b, jobEvent(manifest.EventSucceeded, j, base+manifest.EventSucceeded,
			fmt.Sprintf("Job %s succeeded", j.ID), "", now, attempt))
	case model.JobFailed:
		facts := []notifications.Fact{attempt}
		if j.ExitCode != nil {
			facts = append(facts, notifications.Fact{Name: "Exit code", Value: fmt.Sprint(*j.ExitCode)})
		}
		c.notifyLocked(b, jobEvent(manifest.EventFailed, j, base+manifest.EventFailed,
			fmt.Sprintf("Job %s failed", j.ID), j.Reason, now, facts...))
	}
}

// stuckLocked fires stuck-queued for every queued job that has waited
// longer than a Notification's stuckAfter, once per time it entered the
// queue: the job records it (Job.NotifiedStuck) in b with the
// notification. Callers hold c.mu and commit b.
func (c *Controller) stuckLocked(b *store.Batch, now time.Time) {
	if c.fleet.set == nil || !slices.ContainsFunc(c.fleet.set.Notifications, func(d manifest.Notification) bool {
		return d.Spec.Wants(manifest.EventStuckQueued)
	}) {
		return
	}
	type due struct {
		j    *model.Job
		docs []*manifest.Notification
	}
	var found []due
	c.st.EachPending(func(j *model.Job) {
		if docs := notifications.StuckDue(c.fleet.set.Notifications, j, now); len(docs) > 0 {
			found = append(found, due{j, docs})
		}
	})
	slices.SortFunc(found, func(x, y due) int { return strings.Compare(x.j.ID, y.j.ID) })
	for _, f := range found {
		j := f.j.Clone()
		// Keep only this spell's keys: older ones can never match again.
		j.NotifiedStuck = slices.DeleteFunc(j.NotifiedStuck, func(k string) bool {
			return !strings.HasSuffix(k, notifications.StuckKey("", j.EnqueuedAt))
		})
		for _, d := range f.docs {
			j.NotifiedStuck = append(j.NotifiedStuck, notifications.StuckKey(d.Metadata.Name, j.EnqueuedAt))
			waited := now.Sub(j.EnqueuedAt).Truncate(time.Second)
			ev := jobEvent(manifest.EventStuckQueued, j, "job/"+j.ID+"/stuck/"+j.EnqueuedAt.UTC().Format(time.RFC3339Nano),
				fmt.Sprintf("Job %s has waited queued for %s", j.ID, waited), j.Reason, now,
				notifications.Fact{Name: "Waiting since", Value: j.EnqueuedAt.UTC().Format(time.RFC3339)},
				notifications.Fact{Name: "Threshold", Value: d.Spec.StuckAfter.String()})
			c.notifyLocked(b, ev, d.Metadata.Name)
		}
		j.Version++
		c.st.PutJob(j)
		b.Jobs = append(b.Jobs, j)
	}
}

// budgetEvent describes budget firing f.
func budgetEvent(f cost.Firing, now time.Time) notifications.Event {
	id := fmt.Sprintf("budget/%s/%d/%s", f.Budget, f.Key.Threshold, f.Key.PeriodStart.UTC().Format(time.DateOnly))
	return notifications.Event{ID: id, Kind: manifest.EventBudget, Time: now, Project: f.Scope.Project, Queue: f.Scope.Queue, Tags: f.Scope.Tags,
		Title: fmt.Sprintf("Budget %s reached %d%% (%s)", f.Budget, f.Key.Threshold, f.Action),
		Text:  fmt.Sprintf("%s of %s spent (%s) in the period ending %s", f.Spent.USD(), f.Limit.USD(), f.Basis, f.PeriodEnd.UTC().Format(time.DateOnly)),
		Facts: []notifications.Fact{{Name: "Budget", Value: f.Budget}, {Name: "Scope", Value: f.Scope.String()},
			{Name: "Action", Value: string(f.Action)}}}
}

// alertEventLocked describes alert a, scoped by its job when it has one.
// Callers hold c.mu.
func (c *Controller) alertEventLocked(a Alert) notifications.Event {
	ev := notifications.Event{ID: "alert/" + a.ID, Kind: manifest.EventAlert, Time: a.At, Job: a.Job, Queue: a.Queue,
		Title: fmt.Sprintf("Alert %s (%s)", a.Rule, a.Severity), Text: a.Summary}
	if j, ok := c.st.Job(a.Job); ok && a.Job != "" {
		ev.Project, ev.Queue, ev.Tags = j.Project, j.Spec.Queue, j.Tags
	}
	for _, f := range []notifications.Fact{{Name: "Node", Value: a.Node}, {Name: "GPU", Value: a.GPU}} {
		if f.Value != "" {
			ev.Facts = append(ev.Facts, f)
		}
	}
	return ev
}
