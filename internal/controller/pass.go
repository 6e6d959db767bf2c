package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/state"
	"github.com/gpufleet/gpufleet/internal/store"
)

// pass runs one scheduling cycle:
//  1. under the mutex, skip the pass when none of its inputs changed since
//     the last one and none of its wake-up times is due (passMemo);
//  2. snapshot the state under the mutex (cheap: pointers and free lists);
//  3. compute a Plan without the mutex (pure; the scheduler's Memory
//     only saves reading unchanged queued jobs again);
//  4. under the mutex, commit each binding whose job and GPUs are unchanged
//     since the snapshot; the rest are planned again next pass;
//  5. wait for the commit, then wake the agents of the touched nodes.
//
// When the plan is settled (scheduler.Plan.Settled) and every binding
// committed onto the state the snapshot saw, the memo is recorded for the
// state as committed: the pass right after a commit, which would decide
// nothing new, is skipped like an idle one.
func (c *Controller) pass(ctx context.Context) error {
	offers := c.cfg.Offers(ctx)
	view := c.passDrivers(ctx) // what the pools' drivers sell: I/O only for a pool new since the last scale cycle
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	offers = c.buyableLocked(offers, view, now)
	c.st.ExpireNominations(now)
	in := passInputs{version: c.st.Version(), offers: offers, holds: c.holdsLocked()}
	if c.memo.current(in, now) {
		c.memo.skipped++
		c.mu.Unlock()
		return nil
	}
	snap := c.st.Snapshot()
	snap.Holds = in.holds // budgets: jobs that wait for a new period
	snap.Datasets = c.heldDataLocked()
	if len(snap.Pending) == 0 {
		c.memo.record(in, now, time.Time{})
		c.mu.Unlock()
		return nil
	}
	c.memo.schedules++
	c.memo.jobs += uint64(len(snap.Pending))
	c.mu.Unlock()
	plan := c.sched.Schedule(snap, offers, now, c.cfg.Seed)

	c.mu.Lock()
	before := c.st.Version() // what else changed since the snapshot
	b := &store.Batch{}
	bound := 0
	for _, bnd := range plan.Bindings {
		job, attempt, ok := c.bindLocked(bnd)
		if !ok {
			continue
		}
		bound++
		b.Jobs = append(b.Jobs, job)
		b.Attempts = append(b.Attempts, attempt)
		c.cfg.Metrics.queueWait(now.Sub(job.EnqueuedAt))
	}
	preempted := 0
	for _, pe := range plan.Preemptions {
		if a, ok := c.preemptLocked(pe); ok {
			preempted++
			b.Attempts = append(b.Attempts, a)
			c.nominateLocked(pe.ForJobID, a, now)
		}
	}
	c.verdicts = plan.Verdicts
	c.lastPlan = &plan
	c.memo.record(in, now, plan.Wake)
	if bound == 0 && preempted == 0 {
		c.mu.Unlock()
		return nil
	}
	c.broadcastLocked()
	cm := c.com.submit(b)
	if plan.Settled && bound == len(plan.Bindings) && before == plan.SnapshotVersion {
		// The pass after this commit would decide nothing new
		// (scheduler.Plan.Settled): the memo holds for the state as
		// committed, until something else changes it.
		in.version = c.st.Version()
		c.memo.record(in, now, plan.Wake)
	}
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return fmt.Errorf("committing %d bindings and %d preemptions: %w", bound, preempted, err)
	}
	c.mu.Lock()
	for _, a := range b.Attempts {
		c.bumpNodesLocked(a)
	}
	c.mu.Unlock()
	c.cfg.Log.Debug("plan committed", "bindings", bound, "preemptions", preempted, "snapshot", plan.SnapshotVersion)
	return nil
}

// passDrivers is launchDrivers for a pass: cached offers of the pools'
// drivers, listing only pools not seen at their revision.
func (c *Controller) passDrivers(ctx context.Context) launchView {
	sc := &c.cfg.Scale
	if !sc.scaling() {
		return launchView{}
	}
	c.mu.Lock()
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = sc.DefaultPools
	}
	c.mu.Unlock()
	return c.launchDrivers(ctx, pools, false)
}

// buyableLocked narrows the offers the scheduler ranks to those the scale
// loop could launch now (autoscaler.Buyable): sold by a pool's launching
// driver (the configured offers, then any other the drivers sell), admitted
// by a pool with room, not backing off or unavailable. Without a scale
// loop nothing is bought and the offers stay as they are, for information.
// Callers hold c.mu.
func (c *Controller) buyableLocked(offers []model.Offer, view launchView, now time.Time) []model.Offer {
	sc := c.cfg.Scale
	if !sc.scaling() {
		return offers
	}
	if len(view.offers) > 0 {
		seen := make(map[autoscaler.OfferIdent]bool, len(offers))
		for _, o := range offers {
			seen[autoscaler.IdentOf(o)] = true
		}
		offers = slices.Clip(offers) // never append into the caller's array
		for _, o := range view.offers {
			if !seen[autoscaler.IdentOf(o)] {
				offers = append(offers, o)
			}
		}
	}
	if len(offers) == 0 {
		return offers
	}
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = sc.DefaultPools
	}
	size := map[string]int{}
	for _, n := range c.st.ActiveNodes() {
		switch n.State {
		case model.NodeLaunching, model.NodeReady, model.NodeDraining:
			if n.Pool != "" {
				size[n.Pool]++
			}
		}
	}
	return autoscaler.Buyable(offers, pools, view.drivers, size, &c.scaleSt.memory, now)
}

// bindLocked turns a binding into a new attempt if the job is still the
// version the plan saw and every GPU it names is still free.
func (c *Controller) bindLocked(bnd scheduler.Binding) (*model.Job, *model.Attempt, bool) {
	j, ok := c.st.Job(bnd.JobID)
	if !ok || j.Version != bnd.JobVersion || j.State != model.JobQueued {
		return nil, nil, false
	}
	for _, p := range bnd.Replicas {
		n, ok := c.st.Node(p.NodeID)
		if !ok || n.State != model.NodeReady {
			return nil, nil, false
		}
		for _, g := range p.GPUs {
			if c.st.GPUHolder(p.NodeID, g) != "" {
				return nil, nil, false
			}
			if used := c.st.GPUShareUsed(p.NodeID, g); used > 0 && (p.Share == 0 || used+p.Share > 1+1e-9) {
				return nil, nil, false
			}
		}
	}
	now := c.cfg.Clock.Now()
	j = j.Clone()
	j.Attempts++
	j.State = model.JobAdmitted
	j.Reason = ""
	j.RetryAt = nil
	j.Version++
	a := &model.Attempt{
		ID:        model.AttemptID(j.ID, j.Attempts),
		JobID:     j.ID,
		Number:    j.Attempts,
		State:     model.AttemptStarting,
		CreatedAt: now,
		Version:   1,
		Placement: bnd.Reasons,
	}
	for _, p := range bnd.Replicas {
		a.Replicas = append(a.Replicas, model.Replica{Rank: p.Rank, NodeID: p.NodeID, GPUs: append([]int(nil), p.GPUs...), GPUShare: p.Share, State: model.AttemptStarting})
	}
	c.st.PutJob(j)
	c.st.PutAttempt(a)
	return j, a, true
}

// preemptLocked asks a victim attempt to stop through the normal drain
// path: its replicas get the job's checkpoint signal and grace period, and
// the attempt ends preempted, which requeues the job (finishLocked, by
// retries.preemptions). It does nothing when the attempt changed since
// the plan's snapshot or is already stopping.
func (c *Controller) preemptLocked(pe scheduler.Preemption) (*model.Attempt, bool) {
	a, ok := c.st.Attempt(pe.AttemptID)
	if !ok || a.State.Terminal() || a.Stop || (pe.AttemptVersion != 0 && a.Version != pe.AttemptVersion) {
		return nil, false
	}
	a = a.Clone()
	a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, pe.Reason
	a.Version++
	c.st.PutAttempt(a)
	if len(a.Replicas) > 0 {
		if n, ok := c.st.Node(a.Replicas[0].NodeID); ok {
			c.cfg.Metrics.preempted(n.Provider, n.Region)
		}
	}
	c.cfg.Log.Info("preempting", "job_id", pe.JobID, "attempt", a.Number, "for_job_id", pe.ForJobID, "work_lost", pe.WorkLost.String(), "reason", pe.Reason)
	return a, true
}

// nominationSlack is how long, beyond a victim's grace period, its GPUs
// stay nominated for the job it was preempted for: time for the agent to
// report the exit and for the next pass to bind the preemptor.
const nominationSlack = 2 * time.Minute

// nominateLocked holds the GPUs of victim for the job it is preempted for,
// so the next passes give them to no other job while it drains. The
// nomination ends when that job binds or leaves the queue, or expires.
func (c *Controller) nominateLocked(forJob string, victim *model.Attempt, now time.Time) {
	grace := model.DefaultGrace
	if j, ok := c.st.Job(victim.JobID); ok {
		grace = j.Spec.Checkpoint.Grace
	}
	n := state.Nomination{JobID: forJob, Expires: now.Add(time.Duration(grace) + nominationSlack)}
	for _, r := range victim.Replicas {
		if len(r.GPUs) > 0 && r.GPUShare == 0 {
			n.GPUs = append(n.GPUs, state.NodeGPUs{NodeID: r.NodeID, GPUs: append([]int(nil), r.GPUs...)})
		}
	}
	if len(n.GPUs) > 0 {
		c.st.Nominate(n)
	}
}

// bumpNodesLocked tells the agents of a's nodes that their desired set changed.
func (c *Controller) bumpNodesLocked(a *model.Attempt) {
	for _, r := range a.Replicas {
		c.nodeGen.bump(r.NodeID)
	}
	c.broadcastLocked()
}

// checkpointDirFor names a's checkpoint folder without creating it: the
// caller, which holds c.mu, adds the attempt to *mk when its folder has not
// been made yet, and makeCheckpointDirs creates those once the lock is
// released, before the replicas reach an agent.
func (c *Controller) checkpointDirFor(a *model.Attempt, mk *[]ckptDir) string {
	if c.cfg.CheckpointDir == "" {
		return ""
	}
	dir := filepath.Join(c.cfg.CheckpointDir, a.JobID)
	if !c.ckptMade[a.ID] {
		*mk = append(*mk, ckptDir{attemptID: a.ID, dir: dir})
	}
	return dir
}

// ckptDir is a checkpoint folder an attempt's replicas are about to be
// given, not yet known to exist.
type ckptDir struct{ attemptID, dir string }

// makeCheckpointDirs creates the folders in mk, outside c.mu, then records
// them as made for the attempts still live, so each attempt's folder is
// created once rather than at every sync. Callers do not hold c.mu.
func (c *Controller) makeCheckpointDirs(mk []ckptDir) error {
	if len(mk) == 0 {
		return nil
	}
	made := map[string]bool{}
	for _, d := range mk {
		if made[d.dir] {
			continue
		}
		if err := os.MkdirAll(d.dir, 0o700); err != nil {
			return fmt.Errorf("creating checkpoint dir: %w", err)
		}
		made[d.dir] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ckptMade == nil {
		c.ckptMade = map[string]bool{}
	}
	for _, d := range mk {
		// An attempt that ended meanwhile was forgotten (forgetSpecsLocked):
		// marking it would leak the entry.
		if a, ok := c.st.Attempt(d.attemptID); ok && !a.State.Terminal() {
			c.ckptMade[d.attemptID] = true
		}
	}
	return nil
}
