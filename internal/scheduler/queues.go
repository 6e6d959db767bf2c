package scheduler

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

const eps = 1e-9

// AgingPerMinute is how many priority points a job gains per minute it
// waits, so that nothing starves: a "low" job (0) that has waited 100
// minutes orders like a fresh "normal" one (100). Aging orders jobs; it
// never lets a job preempt (preemption compares class values).
const AgingPerMinute = 1.0

// queueState is one queue during a pass: its quota, what it uses, and its
// pending jobs in order.
type queueState struct {
	name      string
	tie       uint64 // seeded rank among queues of equal fair share
	weight    float64
	unlimited bool
	missing   bool // named by jobs but not declared
	cohort    *cohortState
	nominal   map[string]float64
	limit     map[string]float64 // absent: no borrowing limit
	used      map[string]float64 // by quota key
	alloc     map[string]float64 // by GPU model, for dominant share
	dom       float64
	usage     float64 // share of the fleet's decayed usage
	jobs      []*pjob
	pending   int // len(jobs) once buildQueues has filled it
	next      int
	// reserved is set once a blocked job of this queue holds a backfill
	// reservation this pass (EASY: one per queue).
	reserved bool
	minLive  int // lowest live priority value, for preemption eligibility
	// minFixed is the lowest value of live non-preemptible work, to
	// explain a preemption that policy forbids.
	minFixed int
	// minBound is the lowest value of preemptible work this pass bound
	// (settled).
	minBound int
	why      quotaWhy
}

type cohortState struct {
	name    string
	nominal map[string]float64
	used    map[string]float64
}

// quotaKey is the quota line GPUs of model m count against in q.
func (q *queueState) quotaKey(m string) string {
	if _, ok := q.nominal[m]; ok {
		return m
	}
	if _, ok := q.nominal[model.AnyGPU]; ok {
		return model.AnyGPU
	}
	return m
}

// admit says whether q may take amount more GPUs of model m, and why not.
func (q *queueState) admit(m string, amount float64) (string, bool) {
	if q.unlimited {
		return "", true
	}
	key := q.quotaKey(m)
	nominal, used := q.nominal[key], q.used[key]
	if used+amount <= nominal+eps {
		return "", true
	}
	var cused float64
	if q.cohort != nil {
		cused = q.cohort.used[key]
	}
	// A blocked queue refuses job after job on the same use: the
	// message is formatted once per use, not once per job and class.
	w := &q.why
	if w.msg != "" && w.key == key && w.amount == amount && w.used == used && w.cused == cused {
		return w.msg, w.ok
	}
	msg, ok := q.refuse(key, nominal, used, amount)
	*w = quotaWhy{key: key, amount: amount, used: used, cused: cused, msg: msg, ok: ok}
	return msg, ok
}

// quotaWhy remembers queueState.admit's last answer beyond nominal.
type quotaWhy struct {
	key                 string
	amount, used, cused float64
	msg                 string
	ok                  bool
}

func (q *queueState) refuse(key string, nominal, used, amount float64) (string, bool) {
	label := key
	if key == model.AnyGPU {
		label = "any GPU (*)"
	}
	if q.cohort == nil {
		return fmt.Sprintf("quota for %s is %g GPUs, %g in use, job needs %g; the queue has no cohort to borrow from", label, nominal, used, amount), false
	}
	borrow := used + amount - nominal
	if lim, ok := q.limit[key]; ok && borrow > lim+eps {
		return fmt.Sprintf("quota for %s is %g GPUs, %g in use; the job's %g would borrow %g, above borrowingLimit %g", label, nominal, used, amount, borrow, lim), false
	}
	c := q.cohort
	if c.used[key]+amount > c.nominal[key]+eps {
		return fmt.Sprintf("quota for %s is %g GPUs, %g in use, job needs %g; cohort %s has %g unused to lend", label, nominal, used, amount, c.name, max(0, c.nominal[key]-c.used[key])), false
	}
	return "", true
}

func (q *queueState) charge(m string, amount float64, capacity map[string]float64) {
	q.alloc[m] += amount
	if c := capacity[m]; c > 0 {
		q.dom = max(q.dom, q.alloc[m]/c)
	}
	if q.unlimited {
		return
	}
	key := q.quotaKey(m)
	q.used[key] += amount
	if q.cohort != nil {
		q.cohort.used[key] += amount
	}
}

// Reason codes of quota verdicts.
const (
	ReasonQueueQuota   = "queue-quota"
	ReasonProjectQuota = "project-quota"
)

// projectState is one project's GPU quota (Project.spec.quota) during a
// pass: a cap on the GPUs its jobs hold across every queue, per GPU model
// or "*" for any model it does not list. As with a queue, a model it
// neither lists nor covers with "*" has a quota of 0. Unlike a queue's
// quota it lends nothing and borrows nothing.
type projectState struct {
	name  string
	quota map[string]float64
	used  map[string]float64 // by quota key
}

func buildProjects(snap *state.Snapshot) map[string]*projectState {
	if len(snap.ProjectQuota) == 0 {
		return nil
	}
	out := make(map[string]*projectState, len(snap.ProjectQuota))
	for name, quota := range snap.ProjectQuota {
		if len(quota) == 0 {
			continue
		}
		p := &projectState{name: name, quota: quota, used: map[string]float64{}}
		for m, v := range snap.ProjectUse[name] {
			p.charge(m, v)
		}
		out[name] = p
	}
	return out
}

// key is the quota line GPUs of model m count against.
func (p *projectState) key(m string) string {
	if _, ok := p.quota[m]; ok {
		return m
	}
	if _, ok := p.quota[model.AnyGPU]; ok {
		return model.AnyGPU
	}
	return m
}

// admit says whether the project may hold amount more GPUs of model m,
// and why not. A nil project (no quota) admits everything.
func (p *projectState) admit(m string, amount float64) (string, bool) {
	if p == nil {
		return "", true
	}
	key := p.key(m)
	quota, used := p.quota[key], p.used[key]
	if used+amount <= quota+eps {
		return "", true
	}
	label := key
	if key == model.AnyGPU {
		label = "any GPU (*)"
	}
	return fmt.Sprintf("project %s's quota (Project.spec.quota) for %s is %g GPUs, %g in use, job needs %g; it starts when the project's other jobs free GPUs", p.name, label, quota, used, amount), false
}

// charge counts amount GPUs of model m against the project (nil: none).
func (p *projectState) charge(m string, amount float64) {
	if p == nil {
		return
	}
	p.used[p.key(m)] += amount
}

// fairKey orders queues: the lowest weighted dominant share (current
// allocation plus decayed past usage) goes next.
func (q *queueState) fairKey() float64 { return (q.dom + q.usage) / q.weight }

// buildQueues sets up every queue named by a declared queue or a pending
// job. The default queue exists implicitly, unlimited.
//
// The returned order breaks ties between queues of equal fair share: it is
// a shuffle seeded by seed and the snapshot's version, so no queue wins
// every tie by its name, while one snapshot and seed always give one order.
// slots[i] is snap.Pending[i]'s place in the plan's verdicts (nil: i).
func buildQueues(snap *state.Snapshot, slots []int, capacity map[string]float64, projects map[string]*projectState, now time.Time, seed int64, mem *jobMemory) (map[string]*queueState, []*queueState) {
	qs := map[string]*queueState{}
	cohorts := map[string]*cohortState{}
	newQ := func(name string) *queueState {
		return &queueState{name: name, weight: 1, nominal: map[string]float64{}, limit: map[string]float64{},
			used: map[string]float64{}, alloc: map[string]float64{}, minLive: int(^uint(0) >> 1), minFixed: int(^uint(0) >> 1), minBound: int(^uint(0) >> 1)}
	}
	for _, mq := range snap.Queues {
		q := newQ(mq.Name)
		q.weight = mq.Spec.EffectiveWeight()
		q.unlimited = len(mq.Spec.Quota) == 0
		for k, v := range mq.Spec.Quota {
			q.nominal[k] = v.Nominal
			if v.BorrowingLimit != nil {
				q.limit[k] = *v.BorrowingLimit
			}
		}
		if mq.Spec.Cohort != "" && !q.unlimited {
			c := cohorts[mq.Spec.Cohort]
			if c == nil {
				c = &cohortState{name: mq.Spec.Cohort, nominal: map[string]float64{}, used: map[string]float64{}}
				cohorts[mq.Spec.Cohort] = c
			}
			q.cohort = c
			for k, v := range q.nominal {
				c.nominal[k] += v
			}
		}
		qs[q.name] = q
	}
	if _, ok := qs[model.DefaultQueue]; !ok {
		q := newQ(model.DefaultQueue)
		q.unlimited = true
		qs[q.name] = q
	}
	for name, use := range snap.QueueUse {
		q := qs[name]
		if q == nil {
			continue
		}
		for m, v := range use {
			q.charge(m, v, capacity)
		}
	}
	var total float64
	decayed := map[string]float64{}
	for name, u := range snap.Usage {
		v := u.Decay(now, snap.HalfLife)
		decayed[name] = v
		total += v
	}
	if total > 0 {
		for name, v := range decayed {
			if q := qs[name]; q != nil {
				q.usage = v / total
			}
		}
	}
	// The pass's jobs lie in one array, in the pending list's order, and
	// each queue's list takes one allocation, rather than one per job and
	// a list grown job by job. With a memory the array is the memory's
	// (jobMemory.passJobs): the pass walks memory laid out in its order.
	var all []*pjob
	if mem != nil {
		all = mem.passJobs(snap)
	} else {
		pjs := make([]pjob, len(snap.Pending))
		all = make([]*pjob, len(snap.Pending))
		for i, j := range snap.Pending {
			pjs[i] = jobPJob(j, snap.PriorityClasses)
			all[i] = &pjs[i]
		}
	}
	for i, pj := range all {
		q := qs[pj.queue]
		if q == nil {
			q = newQ(pj.queue)
			q.missing = true
			qs[q.name] = q
		}
		pj.q = q
		pj.slot = i
		if slots != nil {
			pj.slot = slots[i]
		}
		pj.atPass(now)
		pj.proj = projects[pj.project]
		q.pending++
	}
	for _, pj := range all {
		q := pj.q
		if q.jobs == nil {
			q.jobs = make([]*pjob, 0, q.pending)
		}
		q.jobs = append(q.jobs, pj)
	}
	list := make([]*queueState, 0, len(qs))
	for _, q := range qs {
		slices.SortStableFunc(q.jobs, (*pjob).compare)
		list = append(list, q)
	}
	for _, q := range list {
		q.tie = tieRank(seed, snap.Version, q.name)
	}
	sort.Slice(list, func(a, b int) bool {
		if list[a].tie != list[b].tie {
			return list[a].tie < list[b].tie
		}
		return list[a].name < list[b].name
	})
	return qs, list
}

// tieRank hashes a name with the seed and snapshot version (FNV-1a).
func tieRank(seed int64, version uint64, name string) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], version)
	h.Write(b[:])
	h.Write([]byte(name))
	return h.Sum64()
}

// pjob is a pending job during a pass.
type pjob struct {
	job *model.Job
	// id is job.ID, retryAt job.RetryAt, after whether job.Spec.After
	// names any job, and interval its checkpoint interval: copied here so
	// that a turn taken from a pass's memory (Memory) reads the job's
	// own, scattered fields only where it must.
	id       string
	retryAt  *time.Time
	after    bool
	interval model.Duration
	enqueued time.Time // job.EnqueuedAt
	seq      uint64    // job.Seq
	dl       bool      // job.Spec.Limits.Deadline is set
	queue    string    // job.Spec.Queue
	project  string    // job.Project
	// key is the job's fitKey when it does not depend on the pass's time
	// (no deadline rule), computed once per job version (Memory); nil:
	// fitKeyOf computes it.
	key         *fitKey
	q           *queueState
	proj        *projectState // nil: the project has no quota
	slot        int           // the job's place in the plan's Verdicts
	prio        int           // class value
	eff         float64       // aged priority, for order
	preemptible bool
	g           int     // whole GPUs per replica
	share       float64 // fraction of one GPU per replica, when 0 < gpus < 1
	runtime     time.Duration
	spot        model.SpotPolicy // EffectiveSpot
	// deadline is what the deadline rule weighs spot capacity by; unset
	// for a job it does not apply to.
	deadline deadlineReq
	// data is the digests of the job's datasets (model.DataDigest).
	data []string
}

// classOf is the priority class called name: declared, else built-in,
// else the default class (a class removed from the fleet since).
func classOf(declared []model.PriorityClass, name string) model.PriorityClass {
	if pc, ok := model.ResolvePriorityClass(declared, name); ok {
		return pc
	}
	pc, _ := model.ResolvePriorityClass(declared, model.DefaultPriority)
	return pc
}

// jobPJob is what a pass derives from j and the priority classes alone,
// the same in every pass (Memory keeps it per job version): everything
// but the queue's and project's states (q, proj) and what atPass sets.
func jobPJob(j *model.Job, classes []model.PriorityClass) pjob {
	pc := classOf(classes, j.Spec.Priority)
	pj := pjob{job: j, id: j.ID, retryAt: j.RetryAt, after: len(j.Spec.After) > 0, interval: j.Spec.Checkpoint.Interval,
		enqueued: j.EnqueuedAt, seq: j.Seq, dl: j.Spec.Limits.Deadline != nil, queue: j.Spec.Queue, project: j.Project,
		prio: pc.Value, preemptible: pc.Preemptible, runtime: runtimeOf(j), data: j.Spec.DataDigests(j.Project)}
	pj.spot = EffectiveSpot(j, pj.runtime, time.Time{})
	gpus := j.Spec.Resources.GPUs
	if gpus > 0 && gpus < 1 {
		pj.share = gpus
	} else {
		pj.g = int(gpus)
	}
	return pj
}

// atPass sets what pj's pass derives from its time: the aged priority and
// the deadline rule's window.
func (pj *pjob) atPass(now time.Time) {
	pj.eff = float64(pj.prio)
	pj.deadline = deadlineReq{}
	if pj.dl {
		pj.deadline = deadlineOf(pj.job, pj.spot, pj.runtime, now)
	}
	if w := now.Sub(pj.enqueued); w > 0 && !pj.enqueued.IsZero() {
		pj.eff += w.Minutes() * AgingPerMinute
	}
}

// backoff is job.Backoff, from the copy of its RetryAt.
func (pj *pjob) backoff(now time.Time) (time.Time, bool) {
	if pj.retryAt == nil || !now.Before(*pj.retryAt) {
		return time.Time{}, false
	}
	return *pj.retryAt, true
}

// compare orders a queue's jobs: higher aged priority first, then earlier
// enqueued, then earlier accepted.
func (a *pjob) compare(b *pjob) int {
	if a.eff != b.eff {
		if a.eff > b.eff {
			return -1
		}
		return 1
	}
	if c := a.enqueued.Compare(b.enqueued); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// EffectiveSpot is the job's spot policy as the scheduler applies it now:
// a job that allows spot falls back to on-demand (never) once it has been
// preempted retries.onDemandAfterPreemptions times. A job that requires
// spot keeps requiring it. A deadline is not decided here but per spot
// offer and node, by the chance of finishing in time at its interruption
// rate (deadlineOf, spotRisk): one spot offer may be safe where another
// is not. runtime and now are kept for callers that weigh more.
func EffectiveSpot(j *model.Job, runtime time.Duration, now time.Time) model.SpotPolicy {
	sp := j.Spec.Spot
	if sp == model.SpotNever || sp == model.SpotRequired {
		return sp
	}
	if n := j.Spec.Retries.OnDemandAfterPreemptions; n > 0 && j.Preemptions >= n {
		return model.SpotNever
	}
	return sp
}

// deadlineOf is what the deadline rule weighs a job's spot capacity by: set
// for a job that allows spot (effective policy), has limits.deadline and a
// runtime estimate or limit (without one the risk cannot be weighed, and
// spot is not refused on its account).
func deadlineOf(j *model.Job, spot model.SpotPolicy, runtime time.Duration, now time.Time) deadlineReq {
	dl := j.Spec.Limits.Deadline
	if spot != model.SpotAllowed || dl == nil || runtime <= 0 {
		return deadlineReq{}
	}
	return deadlineReq{work: runtime, window: dl.Sub(now), interval: j.Spec.Checkpoint.Interval.D(), restart: j.Spec.Checkpoint.Restart.D()}
}

// runtimeOf is the job's expected runtime: its estimate, else its runtime
// limit, else 0 (unknown).
func runtimeOf(j *model.Job) time.Duration {
	if d := j.Spec.Estimate.Runtime.D(); d > 0 {
		return d
	}
	return j.Spec.Limits.Runtime.D()
}
