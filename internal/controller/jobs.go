package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

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
	Spec    model.JobSpec
	// IdempotencyKey, when set, makes a retried submission return the
	// job the first one created. BodyHash tells retries from reuse.
	IdempotencyKey string
	BodyHash       []byte
}

// Submit records a new queued job durably. created is false when an earlier
// submission with the same idempotency key made the job.
func (c *Controller) Submit(ctx context.Context, s Submission) (job *model.Job, created bool, err error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	var idem []store.Idempotency
	if s.IdempotencyKey != "" {
		k := idemKey{s.User, s.IdempotencyKey}
		if rec, ok := c.idem[k]; ok && now.Before(rec.Expires) {
			prev, found := c.st.Job(rec.JobID)
			c.mu.Unlock()
			if !bytes.Equal(rec.BodyHash, s.BodyHash) {
				return nil, false, fmt.Errorf("idempotency key %q was used for a different request: %w", s.IdempotencyKey, ErrConflict)
			}
			if !found {
				return nil, false, fmt.Errorf("job %s of idempotency key %q: %w", rec.JobID, s.IdempotencyKey, ErrNotFound)
			}
			return prev, false, nil
		}
	}
	c.seq++
	job = &model.Job{
		ID:          newID("j-"),
		Name:        s.Name,
		Project:     s.Project,
		User:        s.User,
		Tags:        s.Tags,
		Spec:        s.Spec,
		State:       model.JobQueued,
		SubmittedAt: now,
		EnqueuedAt:  now,
		Seq:         c.seq,
		Version:     1,
	}
	if s.IdempotencyKey != "" {
		rec := store.Idempotency{Subject: s.User, Key: s.IdempotencyKey, JobID: job.ID, BodyHash: s.BodyHash, Expires: now.Add(c.cfg.IdempotencyTTL)}
		c.idem[idemKey{s.User, s.IdempotencyKey}] = rec
		idem = append(idem, rec)
	}
	c.st.PutJob(job)
	c.broadcastLocked()
	cm := c.com.submit(&store.Batch{Jobs: []*model.Job{job}, Idempotency: idem})
	c.mu.Unlock()
	c.trigger()
	if err := cm.wait(ctx); err != nil {
		return nil, false, fmt.Errorf("recording job: %w", err)
	}
	c.cfg.Metrics.submitted()
	return job, true, nil
}

// Job returns a job by id.
func (c *Controller) Job(id string) (*model.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.st.Job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return j, nil
}

// JobFilter selects jobs for Jobs.
type JobFilter struct {
	States  []model.JobState
	Project string
	// Limit bounds the result to the newest jobs; 0 means 1000.
	Limit int
}

// Jobs returns matching jobs, newest first.
func (c *Controller) Jobs(f JobFilter) []*model.Job {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	want := map[model.JobState]bool{}
	for _, s := range f.States {
		want[s] = true
	}
	var out []*model.Job
	c.mu.Lock()
	c.st.Jobs(func(j *model.Job) bool {
		if (len(want) == 0 || want[j.State]) && (f.Project == "" || j.Project == f.Project) {
			out = append(out, j)
		}
		return true
	})
	c.mu.Unlock()
	sort.Slice(out, func(i, k int) bool { return out[i].Seq > out[k].Seq })
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}

// Attempts returns a job's attempts in order.
func (c *Controller) Attempts(jobID string) ([]*model.Attempt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.st.Job(jobID); !ok {
		return nil, fmt.Errorf("job %s: %w", jobID, ErrNotFound)
	}
	return c.st.AttemptsOf(jobID), nil
}

// Verdict returns why a pending job was not placed in the last pass.
func (c *Controller) Verdict(jobID string) (scheduler.Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.verdicts[jobID]
	return v, ok
}

// Cancel ends a job. A queued job is cancelled at once; a running one is
// asked to stop through its checkpoint signal and grace period and ends
// cancelled when its replicas have exited.
func (c *Controller) Cancel(ctx context.Context, id string) (*model.Job, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	j, ok := c.st.Job(id)
	if !ok {
		c.mu.Unlock()
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if j.State.Terminal() {
		c.mu.Unlock()
		return nil, fmt.Errorf("job %s already ended %s: %w", id, j.State, ErrConflict)
	}
	b := &store.Batch{}
	if a, live := c.st.LiveAttempt(id); live {
		if !a.Stop {
			a = a.Clone()
			a.Stop, a.StopState, a.StopWhy = true, model.AttemptCancelled, model.ReasonCancelled
			a.Version++
			c.st.PutAttempt(a)
			b.Attempts = append(b.Attempts, a)
			c.bumpNodesLocked(a)
		}
	} else {
		j = j.Clone()
		j.State, j.Reason = model.JobCancelled, model.ReasonCancelled
		j.FinishedAt = &now
		j.Version++
		c.st.PutJob(j)
		b.Jobs = append(b.Jobs, j)
		delete(c.verdicts, id)
	}
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return nil, fmt.Errorf("recording cancellation: %w", err)
	}
	return j, nil
}
