package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// QueueStatus is model.QueueStatus, declared there so the API and its client
// need not import the controller.
type QueueStatus = model.QueueStatus

// Queues returns every queue, the implicit default included.
func (c *Controller) Queues() []QueueStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	qs := c.st.Queues()
	out := make([]QueueStatus, 0, len(qs)+1)
	hasDefault := false
	for _, q := range qs {
		hasDefault = hasDefault || q.Name == model.DefaultQueue
		out = append(out, c.queueStatusLocked(q, false))
	}
	if !hasDefault {
		out = append(out, c.queueStatusLocked(&model.Queue{Name: model.DefaultQueue}, true))
	}
	return out
}

// Queue returns one queue; the default queue exists implicitly.
func (c *Controller) Queue(name string) (QueueStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.st.Queue(name); ok {
		return c.queueStatusLocked(q, false), nil
	}
	if name == model.DefaultQueue {
		return c.queueStatusLocked(&model.Queue{Name: model.DefaultQueue}, true), nil
	}
	return QueueStatus{}, fmt.Errorf("queue %s: %w", name, ErrNotFound)
}

func (c *Controller) queueStatusLocked(q *model.Queue, implicit bool) QueueStatus {
	pending := 0
	c.st.Jobs(func(j *model.Job) bool {
		if j.State == model.JobQueued && j.Spec.Queue == q.Name {
			pending++
		}
		return true
	})
	return QueueStatus{Queue: q, Implicit: implicit, Use: c.st.QueueUse(q.Name), Pending: pending,
		DecayedUsage: c.st.Usage(q.Name).Decay(c.cfg.Clock.Now(), c.halfLifeLocked())}
}

func (c *Controller) halfLifeLocked() time.Duration { return c.st.HalfLife() }

// PutQueue creates or replaces a queue. spec must be valid (see
// model.QueueSpec.Validate). created reports a new queue.
func (c *Controller) PutQueue(ctx context.Context, name string, spec model.QueueSpec) (q *model.Queue, created bool, err error) {
	if !model.ValidName(name) {
		return nil, false, model.FieldErrors{{Path: "metadata.name", Message: "must be lower-case letters, digits and dashes (at most 63)"}}
	}
	if fe := spec.Validate("spec", nil); len(fe) > 0 {
		return nil, false, fe.Err()
	}
	c.mu.Lock()
	q, created = c.putQueueLocked(name, spec)
	c.broadcastLocked()
	cm := c.com.submit(&store.Batch{Queues: []*model.Queue{q}})
	c.mu.Unlock()
	c.trigger()
	if err := cm.wait(ctx); err != nil {
		return nil, false, fmt.Errorf("recording queue %s: %w", name, err)
	}
	return q, created, nil
}

// putQueueLocked sets a queue in memory, a version above the one it
// replaces; the caller commits it. Both the queue API and fleet applies
// write queues through it.
func (c *Controller) putQueueLocked(name string, spec model.QueueSpec) (q *model.Queue, created bool) {
	old, exists := c.st.Queue(name)
	q = &model.Queue{Name: name, Spec: spec, Version: 1, UpdatedAt: c.cfg.Clock.Now()}
	if exists {
		q.Version = old.Version + 1
	}
	c.st.PutQueue(q)
	return q, !exists
}

// DeleteQueue removes a queue. Jobs that name it wait with a verdict until
// it is created again; a queue with live work cannot be deleted.
func (c *Controller) DeleteQueue(ctx context.Context, name string) error {
	c.mu.Lock()
	if _, ok := c.st.Queue(name); !ok {
		c.mu.Unlock()
		return fmt.Errorf("queue %s: %w", name, ErrNotFound)
	}
	if use := c.st.QueueUse(name); len(use) > 0 {
		c.mu.Unlock()
		return fmt.Errorf("queue %s has running work (%v GPUs); cancel or wait for it first: %w", name, use, ErrConflict)
	}
	c.st.DeleteQueue(name)
	c.broadcastLocked()
	cm := c.com.submit(&store.Batch{DeleteQueues: []string{name}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return fmt.Errorf("deleting queue %s: %w", name, err)
	}
	return nil
}

// Explanation is model.Explanation, declared there so the API and its client
// need not import the controller.
type Explanation = model.Explanation

// LaunchBackoff is model.LaunchBackoff.
type LaunchBackoff = model.LaunchBackoff

// Explain says why a job waits, or where it runs.
func (c *Controller) Explain(id string) (Explanation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.st.Job(id)
	if !ok {
		return Explanation{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	e := Explanation{JobID: j.ID, State: j.State, Reason: j.Reason, Queue: j.Spec.Queue, Pending: j.State == model.JobQueued}
	if j.Attempts > 0 {
		if a, ok := c.st.Attempt(model.AttemptID(j.ID, j.Attempts)); ok {
			e.Placement = a.Placement
		}
	}
	if !e.Pending {
		return e, nil
	}
	if v, ok := c.verdicts.Get(id); ok {
		e.Verdict = &v
	}
	if p := c.lastPlan; p != nil {
		for _, r := range p.Reservations {
			if r.JobID == id {
				e.Reservations = append(e.Reservations, r)
			}
		}
		for i := range p.Candidates {
			if p.Candidates[i].JobID == id {
				cand := p.Candidates[i]
				e.Candidate = &cand
			}
		}
		for _, pe := range p.Preemptions {
			if pe.ForJobID == id {
				e.Preempting = append(e.Preempting, pe)
			}
		}
	}
	e.LaunchBackoffs = c.launchBackoffsLocked(id)
	e.Unavailable = c.unavailableForLocked(e.Candidate)
	return e, nil
}

// unavailableForLocked lists the unavailability in force: entries that
// name one of cand's offers (or its region, for a quota) first; at most 10.
func (c *Controller) unavailableForLocked(cand *model.Candidate) []model.Unavailable {
	all := c.scaleSt.memory.UnavailableNow(c.cfg.Clock.Now())
	mine := func(u model.Unavailable) bool {
		if cand == nil {
			return false
		}
		for _, o := range cand.Offers {
			if u.Kind == model.UnavailableQuota && o.Provider == u.Offer.Provider && o.Region == u.Offer.Region ||
				u.Kind != model.UnavailableQuota && autoscaler.OfferKey(o) == autoscaler.OfferKey(u.Offer) {
				return true
			}
		}
		return false
	}
	slices.SortStableFunc(all, func(a, b model.Unavailable) int {
		ma, mb := mine(a), mine(b)
		switch {
		case ma && !mb:
			return -1
		case mb && !ma:
			return 1
		}
		return 0
	})
	return all[:min(len(all), 10)]
}

// launchBackoffsLocked lists the offers in back-off now, the one last
// tried for job first; at most 10.
func (c *Controller) launchBackoffsLocked(job string) []LaunchBackoff {
	m := &c.scaleSt.memory
	now := c.cfg.Clock.Now()
	last := ""
	if o, ok := m.JobLast[job]; ok {
		last = autoscaler.OfferKey(o)
	}
	var out []LaunchBackoff
	for k, until := range m.Until {
		if until.After(now) {
			out = append(out, LaunchBackoff{Offer: k, Failures: m.Failures[k], Until: until, ForJob: k == last})
		}
	}
	slices.SortFunc(out, func(a, b LaunchBackoff) int {
		if a.ForJob != b.ForJob {
			if a.ForJob {
				return -1
			}
			return 1
		}
		return cmp.Or(a.Until.Compare(b.Until), strings.Compare(a.Offer, b.Offer))
	})
	return out[:min(len(out), 10)]
}
