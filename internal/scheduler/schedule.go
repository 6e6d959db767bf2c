package scheduler

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// Limits on the expensive steps of one pass, so a pass over 100,000 pending
// jobs stays fast; what they leave out is tried again next pass.
const (
	// maxPreemptors is how many jobs may look for victims per pass.
	maxPreemptors = 32
	// maxVictimsExamined bounds the victims one preemptor considers, and
	// the entries it reads of each (node class, queue) list.
	maxVictimsExamined = 512
	// maxPreemptionSearches is how many jobs may search victims per pass,
	// found or not, so that a deep queue of jobs nothing can be freed for
	// does not search once each.
	maxPreemptionSearches = 4 * maxPreemptors
)

// DeadlineRecheck is how often a queued job with limits.deadline that may
// run on spot is judged again while nothing else changes (Plan.Wake): its
// chance of finishing in time on each spot offer falls as the deadline
// nears, which changes its candidates and which spot nodes it may use.
const DeadlineRecheck = 30 * time.Second

// sched is one pass.
type sched struct {
	snap   *state.Snapshot
	offers []model.Offer
	now    time.Time
	c      *cluster
	queues map[string]*queueState
	order  []*queueState
	// projects are the projects with a quota (Project.spec.quota).
	projects map[string]*projectState
	plan     *Plan
	feas     map[fitKey]*feasibility
	// wake is the plan's Wake so far.
	wake time.Time
	// lastFit and lastFeas are the last feasibility looked up, and
	// lastKey the memory's key it was looked up by (nil: none).
	lastFit  fitKey
	lastFeas *feasibility
	lastKey  *fitKey
	undo     []undoEntry

	live        *liveIndex // built on first need
	preemptors  int
	searches    int // jobs that searched for victims (see preempt)
	victimTaken map[string]bool
	fixed       map[fixedKey]*Reason // explainFixed's answers
	capCache    map[capKey]capEntry  // capacityReasons' answers
	noVictims   map[noVictimsKey]bool
	resv        []*reservation
	offerRanks  []int // see offerRank
	// noNodes is the reason every job gets in a pass without nodes; see
	// schedule for why verdicts may share it.
	noNodes []Reason

	// nominated holds the GPUs preemption freed for each pending job, and
	// nomMask all nominated GPUs by node (see nominate.go).
	nominated map[string][]nominated
	nomMask   map[int32]uint64

	// blocked are the jobs that tried placement and stayed queued, and
	// unsettled is set once something makes Plan.Settled unprovable
	// (see settled).
	blocked   []*pjob
	unsettled bool

	// turns remembers blocked turns for reuse (turn.go); nil turns reuse
	// off. epoch counts the changes a blocked turn can see.
	turns       map[turnKey]turnMemo
	epoch       uint64
	turnsReused int
}

// Schedule computes a Plan for snap. It is pure: offers may be empty, now is
// the pass's time (aging, decayed usage, work lost, reservations,
// nominations' expiry) and seed, with the snapshot's version, shuffles the
// order in which queues of equal fair share go, so ties rotate between
// passes instead of always favouring one name. Jobs inside a queue never
// tie (their sequence numbers differ); nodes that score alike go in bucket
// order (lowest ids first on a fresh cluster), which packs predictably.
// One snapshot, offers, time and seed always give the same Plan.
//
// The pass, in order:
//  0. Set aside the jobs a budget holds (snap.Holds), each with the hold's
//     reason as its verdict.
//  1. Build the working cluster: node classes and free-count buckets.
//  2. Build queues: quota, cohort lending, current use, decayed usage; sort
//     each queue's pending jobs by aged priority, then age. Withhold GPUs
//     nominated for preemptors from every other job.
//  3. Repeatedly take the next job of the queue with the lowest weighted
//     dominant share (fair share), and:
//     a. hold it while it backs off after a failed attempt (RetryAt) or
//     its dependencies (spec.after) are unmet;
//     b. filter node classes by the job's constraints (cached per shape);
//     c. place every replica on the best-scoring node inside quota (a
//     gang: one domain, all or nothing), or
//     d. backfill it onto GPUs reserved for a blocked job if its runtime
//     estimate ends it before that job's reserved start, or
//     e. preempt: reclaim borrowed quota from the cohort, or stop
//     lower-priority preemptible work of its own queue — the fewest
//     victims by work lost since their last checkpoint, or
//     f. reserve GPUs for it from the estimated end of running work (the
//     first blocked job per queue: EASY backfill), and
//     g. rank offers by expected cost to finish as candidates.
//  4. Every job not bound gets a verdict: its queue position, reasons per
//     node group, queue and offer, and its estimated start where known.
func Schedule(snap *state.Snapshot, offers []model.Offer, now time.Time, seed int64) Plan {
	plan, _ := schedule(snap, offers, now, seed, true, nil)
	return plan
}

// schedule is Schedule, with the reuse of blocked turns (turn.go) on or
// off and a memory of earlier passes' jobs (nil: none), and how many turns
// it reused.
func schedule(snap *state.Snapshot, offers []model.Offer, now time.Time, seed int64, reuse bool, mem *jobMemory) (Plan, int) {
	plan := Plan{SnapshotVersion: snap.Version, Verdicts: newVerdicts(snap.Pending)}
	snap, slots := applyHolds(snap, now, &plan.Verdicts) // budgets: jobs that wait for a new period
	s := &sched{snap: snap, offers: offers, now: now, plan: &plan, feas: map[fitKey]*feasibility{}}
	if reuse {
		s.turns = map[turnKey]turnMemo{}
	}
	s.c = newCluster(snap)
	s.projects = buildProjects(snap)
	s.queues, s.order = buildQueues(snap, slots, s.c.capacity, s.projects, now, seed, mem)
	s.applyNominations()
	for {
		q := s.nextQueue()
		if q == nil {
			break
		}
		pj := q.jobs[q.next]
		q.next++
		held := s.unhold(pj.id)
		bound := len(s.plan.Bindings)
		s.schedule(pj, q.next)
		if len(s.plan.Bindings) == bound {
			s.rehold(held)
		}
	}
	plan.Wake = s.wake
	plan.Settled = s.settled()
	return plan, s.turnsReused
}

// wakeAt lowers the plan's Wake to t, a time after the pass's at which
// its decisions may change through the clock alone.
func (s *sched) wakeAt(t time.Time) {
	if t.After(s.now) && (s.wake.IsZero() || t.Before(s.wake)) {
		s.wake = t
	}
}

// nextQueue returns the queue with jobs left whose weighted share is
// lowest; ties go to the earlier queue in the seeded order.
func (s *sched) nextQueue() *queueState {
	var best *queueState
	var bestKey float64
	for _, q := range s.order {
		if q.next >= len(q.jobs) {
			continue
		}
		k := q.fairKey()
		if best == nil || k < bestKey {
			best, bestKey = q, k
		}
	}
	return best
}

func (s *sched) schedule(pj *pjob, position int) {
	job := pj.job
	v := Verdict{Queue: pj.q.name, Position: position}
	if pj.q.missing {
		v.Reasons = []Reason{{Scope: "queue/" + pj.q.name, Message: "queue does not exist; create it (gpufleet queues apply -f queue.yaml) or submit to \"default\""}}
		s.plan.Verdicts.put(pj.slot, v)
		return
	}
	if until, ok := pj.backoff(s.now); ok {
		// A crash loop waits out its back-off: no placement, preemption,
		// reservation or new capacity for it until then, and it holds
		// nothing up for the jobs behind it.
		v.Reasons = []Reason{backoffReason(job, until, s.now)}
		v.RetryAt = &until
		s.plan.Verdicts.put(pj.slot, v)
		s.wakeAt(until)
		return
	}
	if pj.deadline.set() {
		s.wakeAt(s.now.Add(DeadlineRecheck))
	}
	if pj.after {
		if r, ok := s.dependencies(job); !ok {
			v.Reasons = r
			s.plan.Verdicts.put(pj.slot, v)
			return
		}
	}
	if r, blocked := s.projectBlocked(pj); blocked {
		// Over its project's quota on every model it could use: no
		// placement, preemption, reservation or new capacity helps.
		v.Reasons = []Reason{r}
		s.plan.Verdicts.put(pj.slot, v)
		return
	}
	// Verdicts share reason slices (one per pass here, one per job shape
	// below): nothing changes a verdict's reasons in place, and the
	// slices are clipped, so a verdict that adds reasons copies them first.
	if len(s.snap.Nodes) == 0 {
		if s.noNodes == nil {
			s.noNodes = []Reason{{Scope: "job", Message: "no nodes are registered"}}
		}
		v.Reasons = s.noNodes
		s.candidates(pj, s.feasible(pj), &v)
		s.plan.Verdicts.put(pj.slot, v)
		return
	}
	f := s.feasible(pj)
	if len(f.classes) == 0 {
		v.Reasons = slices.Clip(f.reasons)
		if pj.share > 0 && !s.anyShared() {
			v.Reasons = append([]Reason{{Scope: "job", Message: fmt.Sprintf("asks for %.2f of a GPU, but no node pool marks its GPUs shareable", pj.share)}}, v.Reasons...)
		}
		s.candidates(pj, f, &v)
		s.plan.Verdicts.put(pj.slot, v)
		return
	}
	tk, remember := s.turnKeyOf(pj, f)
	if remember {
		if r, ok := s.reusedTurn(tk); ok {
			s.blocked = append(s.blocked, pj)
			v.Reasons = r
			s.candidates(pj, f, &v)
			s.plan.Verdicts.put(pj.slot, v)
			return
		}
	}
	at := s.turnAt()
	p, reasons := s.place(pj, f)
	if p == nil && len(s.resv) > 0 && pj.runtime > 0 && pj.g > 0 {
		p = s.backfill(pj, f)
	}
	if p != nil {
		s.commit(pj, p)
		return
	}
	s.blocked = append(s.blocked, pj)
	v.Reasons = append(reasons, s.reservedReasons(pj, f)...)
	if s.preempt(pj, f, &v) {
		s.plan.Verdicts.put(pj.slot, v)
		return
	}
	if remember && s.reserveSkips(pj) {
		s.rememberTurn(tk, at, v.Reasons)
	}
	s.reserve(pj, f, &v)
	s.candidates(pj, f, &v)
	s.plan.Verdicts.put(pj.slot, v)
}

// projectBlocked reports whether pj's project quota refuses it on every
// GPU model it could use, with the reason for the first such model.
func (s *sched) projectBlocked(pj *pjob) (Reason, bool) {
	p := pj.proj
	if p == nil || (pj.g == 0 && pj.share == 0) {
		return Reason{}, false
	}
	amount := float64(pj.g * pj.job.Spec.Replicas)
	if pj.share > 0 {
		amount = pj.share * float64(pj.job.Spec.Replicas)
	}
	models := pj.job.Spec.Resources.GPU.Models
	if len(models) == 0 {
		// Any model: those the quota lists ("*" standing for the rest;
		// without it the rest have none).
		for m := range p.quota {
			models = append(models, m)
		}
		slices.Sort(models)
	}
	var first Reason
	for i, m := range models {
		why, ok := s.admit(pj, m, amount)
		if ok || why.Code != ReasonProjectQuota {
			return Reason{}, false
		}
		if i == 0 {
			first = why
		}
	}
	return first, true
}

func (s *sched) anyShared() bool {
	for _, cl := range s.c.classes {
		if cl.shared {
			return true
		}
	}
	return false
}

// admit checks the job's project quota, then its queue's, for amount more
// GPUs of model m, and says why not.
func (s *sched) admit(pj *pjob, m string, amount float64) (Reason, bool) {
	if why, ok := pj.proj.admit(m, amount); !ok {
		return Reason{Scope: "project/" + pj.proj.name, Code: ReasonProjectQuota, Message: why}, false
	}
	if why, ok := pj.q.admit(m, amount); !ok {
		return Reason{Scope: "queue/" + pj.q.name, Code: ReasonQueueQuota, Message: why}, false
	}
	return Reason{}, true
}

func (s *sched) commit(pj *pjob, p *placement) {
	total := 0.0
	for _, r := range p.replicas {
		if r.Share > 0 {
			total += r.Share
		} else {
			total += float64(len(r.GPUs))
		}
	}
	if total > 0 {
		pj.q.charge(p.gpuModel, total, s.c.capacity)
		pj.proj.charge(p.gpuModel, total)
	}
	if pj.preemptible {
		pj.q.minBound = min(pj.q.minBound, pj.prio)
	}
	s.plan.Bindings = append(s.plan.Bindings, Binding{JobID: pj.job.ID, JobVersion: pj.job.Version, Replicas: p.replicas, Reasons: s.dataReasons(pj, p)})
	s.undo = s.undo[:0]
	s.epoch++
}

// dependencies reports whether job's spec.after are met, and why not.
func (s *sched) dependencies(job *model.Job) ([]Reason, bool) {
	var out []Reason
	for _, d := range job.Spec.After {
		st, done := s.snap.Finished[d.Job]
		switch {
		case !s.snap.Known[d.Job]:
			out = append(out, Reason{Scope: "job/" + d.Job, Message: "dependency does not exist; cancel this job or resubmit it without the dependency"})
		case !done:
			out = append(out, Reason{Scope: "job/" + d.Job, Message: "waiting for the dependency to finish"})
		case d.On != model.AfterAny && st != model.JobSucceeded:
			out = append(out, Reason{Scope: "job/" + d.Job, Message: fmt.Sprintf("dependency ended %s and this job waits for success (after on: ok); it can never start — cancel it", st)})
		}
	}
	return out, len(out) == 0
}

// ReasonBackoff: the job's last attempt failed and it waits out its
// crash-loop back-off (model.FailureBackoff) before it may be placed again.
const ReasonBackoff = "backoff"

func backoffReason(job *model.Job, until, now time.Time) Reason {
	return Reason{Scope: "job", Code: ReasonBackoff, Message: fmt.Sprintf("backing off after %d failures (retries.failures %d); next try at %s (in %s)",
		job.Failures, job.Spec.Retries.Failures, until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Second))}
}
