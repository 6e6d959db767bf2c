package controller

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Errors callers branch on (package model declares them).
var (
	ErrNotFound = model.ErrNotFound
	ErrConflict = model.ErrConflict
)

// Submission is model.Submission, declared there so the API and its client
// need not import the controller.
type Submission = model.Submission

// checkSchedulingLocked refuses a job naming a queue or priority class
// this server does not know: it would only wait, forever. Callers hold c.mu.
func (c *Controller) checkSchedulingLocked(s *Submission) model.FieldErrors {
	var fe model.FieldErrors
	if q := s.Spec.Queue; q != "" && q != model.DefaultQueue {
		if _, ok := c.st.Queue(q); !ok {
			names := []string{model.DefaultQueue}
			for _, x := range c.st.Queues() {
				if x.Name != model.DefaultQueue {
					names = append(names, x.Name)
				}
			}
			fe.Add("spec.queue", fmt.Sprintf("queue %q does not exist (queues: %s); create it (gpufleet queues apply -f queue.yaml, or a Queue in the fleet) or submit to %q",
				q, strings.Join(names, ", "), model.DefaultQueue))
		}
	}
	if p := s.Spec.Priority; p != "" {
		if _, ok := model.ResolvePriorityClass(c.st.PriorityClasses(), p); !ok {
			fe.Add("spec.priority", fmt.Sprintf("priority class %q does not exist (classes: %s); declare it in the fleet (kind: PriorityClass) or use one of these",
				p, strings.Join(model.PriorityClassNames(c.st.PriorityClasses()), ", ")))
		}
	}
	return fe
}

// Submit records a new queued job durably. created is false when an earlier
// submission with the same idempotency key made the job.
func (c *Controller) Submit(ctx context.Context, s Submission) (job *model.Job, created bool, err error) {
	now := c.cfg.Clock.Now()
	offers := c.hardBudgetOffers(ctx)
	archiveFE, err := c.checkArchive(&s)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	if fe := append(append(append(archiveFE, c.admitLocked(&s)...), c.checkSecretsLocked(&s)...), c.checkSchedulingLocked(&s)...); len(fe) > 0 {
		c.mu.Unlock()
		return nil, false, fe
	}
	var idem []store.Idempotency
	if s.IdempotencyKey != "" {
		k := idemKey{s.User, s.IdempotencyKey}
		if rec, ok := c.idem[k]; ok && now.Before(rec.Expires) {
			prev, found := c.st.Job(rec.JobID)
			seq := c.com.last()
			c.mu.Unlock()
			if !bytes.Equal(rec.BodyHash, s.BodyHash) {
				return nil, false, fmt.Errorf("idempotency key %q was used for a different request: %w", s.IdempotencyKey, ErrConflict)
			}
			if !found {
				return nil, false, fmt.Errorf("job %s of idempotency key %q: %w", rec.JobID, s.IdempotencyKey, ErrNotFound)
			}
			// A concurrent retry must not be told of a job whose first
			// submission is not yet on disk.
			if err := c.com.barrier(ctx, seq); err != nil {
				return nil, false, fmt.Errorf("recording job: %w", err)
			}
			return prev, false, nil
		}
	}
	if err := c.budgetAdmitLocked(s, now, offers); err != nil {
		c.mu.Unlock()
		return nil, false, err
	}
	c.seq++
	job = &model.Job{
		ID:          c.cfg.NewID("j-"),
		Name:        s.Name,
		Project:     s.Project,
		User:        s.User,
		Trusted:     s.Trusted,
		Tags:        s.Tags,
		Spec:        s.Spec,
		State:       model.JobQueued,
		SubmittedAt: now,
		EnqueuedAt:  now,
		Seq:         c.seq,
		Version:     1,
	}
	jobs := []*model.Job{job}
	if s.Spec.Array > 0 {
		jobs = c.arrayTasksLocked(job, s.Spec.Array)
		job = jobs[0]
	}
	if s.IdempotencyKey != "" {
		rec := store.Idempotency{Subject: s.User, Key: s.IdempotencyKey, JobID: job.ID, BodyHash: s.BodyHash, Expires: now.Add(c.cfg.IdempotencyTTL)}
		c.idem[idemKey{s.User, s.IdempotencyKey}] = rec
		idem = append(idem, rec)
	}
	for _, j := range jobs {
		c.st.PutJob(j)
	}
	b := &store.Batch{Jobs: jobs, Idempotency: idem}
	c.broadcastLocked()
	// The batch's place in the commit order is taken here, under the
	// locks, and the batch (encoded then) is given after them: the jobs
	// are new objects, never changed in place, and every later batch
	// waits for this one's place to be filled.
	var cm *commit
	if s.Audit != nil {
		// The entry is chained and committed with the job, in one batch.
		e := *s.Audit
		e.Time = now
		b.Access.Audit = []*model.AuditEntry{&e}
		c.audit.Chain(&e, func() { cm = c.com.reserve() })
	} else {
		cm = c.com.reserve()
	}
	c.mu.Unlock()
	c.com.fill(cm, b)
	c.trigger()
	if err := cm.wait(ctx); err != nil {
		return nil, false, fmt.Errorf("recording job: %w", err)
	}
	for range jobs {
		c.cfg.Metrics.submitted()
	}
	return job, true, nil
}

// arrayTasksLocked expands an array submission into its n tasks: jobs
// <array id>-<index>, index 0 to n-1, that share ArrayID (the id tmpl got)
// and are scheduled independently. Each takes its own Seq, so the tasks
// queue in index order.
func (c *Controller) arrayTasksLocked(tmpl *model.Job, n int) []*model.Job {
	tasks := make([]*model.Job, n)
	for i := range tasks {
		t := *tmpl
		t.ID = fmt.Sprintf("%s-%d", tmpl.ID, i)
		t.ArrayID, t.ArrayIndex = tmpl.ID, i
		if i > 0 {
			c.seq++
		}
		t.Seq = c.seq
		tasks[i] = &t
	}
	return tasks
}

// Array returns the tasks of an array job, by index.
func (c *Controller) Array(id string) ([]*model.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tasks := c.st.ArrayTasks(id)
	if len(tasks) == 0 {
		return nil, fmt.Errorf("array job %s: %w", id, ErrNotFound)
	}
	return tasks, nil
}

// Job returns a job by id.
func (c *Controller) Job(id string) (*model.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.st.Job(id)
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if _, _, fetching := c.fetchingLocked(j); fetching {
		return c.withWaitReasonLocked(j), nil
	}
	return j, nil
}

// JobFilter is model.JobFilter, declared there so the API and its client
// need not import the controller.
type JobFilter = model.JobFilter

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
		if (len(want) == 0 || want[j.State]) && (f.Project == "" || j.Project == f.Project) && (f.Projects == nil || f.Projects[j.Project]) && (f.Array == "" || j.ArrayID == f.Array) &&
			(f.User == "" || j.User == f.User) && (f.Queue == "" || j.Spec.Queue == f.Queue) && (f.Tagged == "" || j.Tags[f.Tagged] != "") {
			out = append(out, c.withWaitReasonLocked(j))
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

// withWaitReasonLocked is j, or for a queued job with a verdict from the
// last pass a copy whose Reason is why it waits (Verdict.Summary), so
// lists show it. Callers hold c.mu.
func (c *Controller) withWaitReasonLocked(j *model.Job) *model.Job {
	if done, total, ok := c.fetchingLocked(j); ok {
		j = j.Clone()
		j.Reason = FetchingReason(done, total)
		return j
	}
	if j.State != model.JobQueued {
		return j
	}
	v, ok := c.verdicts.Get(j.ID)
	if !ok || len(v.Reasons) == 0 {
		return j
	}
	j = j.Clone()
	j.Reason = v.Summary()
	return j
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

// Verdict returns why a pending job was not placed in the last pass; a
// job that has left the queue since has none.
func (c *Controller) Verdict(jobID string) (scheduler.Verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.st.Job(jobID); !ok || j.State != model.JobQueued {
		return scheduler.Verdict{}, false
	}
	return c.verdicts.Get(jobID)
}

// Cancel ends a job, or every unfinished task of an array job (id is
// then the array's id, and the job returned is nil). A queued job is
// cancelled at once; a running one is asked to stop through its checkpoint
// signal and grace period and ends cancelled when its replicas have exited.
func (c *Controller) Cancel(ctx context.Context, id string) (*model.Job, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	b := &store.Batch{}
	j, ok := c.st.Job(id)
	switch {
	case ok && j.State.Terminal():
		c.mu.Unlock()
		return nil, fmt.Errorf("job %s already ended %s: %w", id, j.State, ErrConflict)
	case ok:
		j = c.cancelLocked(j, b, now)
	default:
		tasks := c.st.ArrayTasks(id)
		if len(tasks) == 0 {
			c.mu.Unlock()
			return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
		}
		for _, t := range tasks {
			if !t.State.Terminal() {
				c.cancelLocked(t, b, now)
			}
		}
		if b.Empty() {
			c.mu.Unlock()
			return nil, fmt.Errorf("every task of array job %s already ended: %w", id, ErrConflict)
		}
	}
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return nil, fmt.Errorf("recording cancellation: %w", err)
	}
	return j, nil
}

// cancelLocked cancels an unfinished job, adding what changed to b, and
// returns the job as it now is.
func (c *Controller) cancelLocked(j *model.Job, b *store.Batch, now time.Time) *model.Job {
	if a, live := c.st.LiveAttempt(j.ID); live {
		// A cancel is final: it takes over a stop already under way
		// (a preemption, a notice's drain, a gang's failure), so however
		// the attempt then ends, the job ends cancelled (finishLocked).
		if !cancelRequested(a) {
			a = a.Clone()
			a.Stop, a.StopState, a.StopWhy = true, model.AttemptCancelled, model.ReasonCancelled
			a.Version++
			c.st.PutAttempt(a)
			b.Attempts = append(b.Attempts, a)
			c.bumpNodesLocked(a)
		}
		return j
	}
	j = j.Clone()
	j.State, j.Reason = model.JobCancelled, model.ReasonCancelled
	j.FinishedAt = &now
	j.Version++
	c.st.PutJob(j)
	b.Jobs = append(b.Jobs, j)
	return j
}

// cancelRequested says whether the job of attempt a was cancelled while a
// ran: its stop is a cancel.
func cancelRequested(a *model.Attempt) bool {
	return a.Stop && a.StopState == model.AttemptCancelled
}

// Checkpoint records that a job completed a checkpoint at the current
// time (DESIGN.md §3.5): work lost by preempting it is measured from here.
// It is durable before it returns; an ended job is a conflict.
func (c *Controller) Checkpoint(ctx context.Context, id string) (*model.Job, error) {
	return c.checkpointAt(ctx, id, c.cfg.Clock.Now())
}

// checkpointAt records that job id completed a checkpoint at the given time.
func (c *Controller) checkpointAt(ctx context.Context, id string, now time.Time) (*model.Job, error) {
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
	j = j.Clone()
	j.LastCheckpoint = &now
	j.Version++
	c.st.PutJob(j)
	cm := c.com.submit(&store.Batch{Jobs: []*model.Job{j}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return nil, fmt.Errorf("recording checkpoint: %w", err)
	}
	return j, nil
}
