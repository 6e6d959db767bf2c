package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// preempt looks for the fewest running attempts whose stopping would let
// pj start: lower-priority preemptible work of its own queue, or work that
// other queues of its cohort run on borrowed quota while pj's queue is
// within its nominal quota (reclaim). Victims are taken lowest priority
// first, then least work lost since their last checkpoint, until pj fits;
// then any victim pj fits without is dropped again, so no more are stopped
// than needed. GPUs already being released by earlier preemptions count
// first and for free, so a waiting job never stops more work pass after
// pass. It reports whether pj now waits for preemption.
func (s *sched) preempt(pj *pjob, f *feasibility, v *Verdict) bool {
	// The caps apply before any scan: past them a blocked job costs
	// nothing here, however many are queued.
	if (pj.g == 0 && pj.share == 0) || s.preemptors >= maxPreemptors {
		return false
	}
	li := s.liveIdx()
	if s.searches >= maxPreemptionSearches {
		s.unsettled = true // a later pass may search for it: see settled
		s.explainFixed(pj, f, v)
		return false
	}
	q := pj.q
	if q.minLive >= pj.prio && q.cohort == nil && li.nReleasing == 0 {
		s.explainFixed(pj, f, v)
		return false
	}
	s.unsettled = true // it may find victims: see settled
	// Victims depend on the job through its classes, queue and priority,
	// and on the pass through what is free and used (the cluster's gen)
	// and what earlier preemptors took, and on GPUs nominated for the job
	// itself: while none of them changes, a job like one that found none
	// finds none either.
	none := noVictimsKey{f, q, pj.prio, s.c.gen, s.preemptors}
	mine := len(s.nominated[pj.job.ID]) > 0
	if !mine && s.noVictims[none] {
		s.explainFixed(pj, f, v)
		return false
	}
	cands, releasing := s.victimsFor(pj, f)
	if len(releasing) > 0 || len(cands) > 0 {
		s.searches++
	} else if !mine {
		if s.noVictims == nil {
			s.noVictims = map[noVictimsKey]bool{}
		}
		s.noVictims[none] = true
	}
	if len(releasing) > 0 && s.fitsWith(pj, f, releasing) {
		v.Reasons = append([]Reason{{Scope: "job", Message: fmt.Sprintf("waiting for %d preempted attempts to save a checkpoint and release their GPUs", len(releasing))}}, v.Reasons...)
		return true
	}
	if len(cands) == 0 {
		s.explainFixed(pj, f, v)
		return false
	}
	sort.Slice(cands, func(a, b int) bool { return victimLess(cands[a], cands[b]) })
	if len(cands) > maxVictimsExamined {
		cands = cands[:maxVictimsExamined]
	}
	chosen := append([]*liveRef(nil), releasing...)
	base := len(chosen)
	fits := false
	for _, c := range cands {
		chosen = append(chosen, c)
		if s.fitsWith(pj, f, chosen) {
			fits = true
			break
		}
	}
	if !fits {
		s.explainFixed(pj, f, v)
		return false
	}
	// Drop every victim the job fits without, latest first.
	for i := len(chosen) - 1; i >= base; i-- {
		without := append(append([]*liveRef(nil), chosen[:i]...), chosen[i+1:]...)
		if s.fitsWith(pj, f, without) {
			chosen = without
		}
	}
	victims := chosen[base:]
	if len(victims) == 0 {
		return false
	}
	if s.victimTaken == nil {
		s.victimTaken = map[string]bool{}
	}
	s.preemptors++
	s.epoch++
	names := make([]string, 0, len(victims))
	for _, r := range victims {
		s.victimTaken[r.attempt.ID] = true
		why := fmt.Sprintf("preempted for %s (priority %s) in queue %s", pj.job.ID, pj.job.Spec.Priority, q.name)
		if r.queue != q.name {
			why = fmt.Sprintf("reclaimed by queue %s for %s: queue %s was borrowing its quota", q.name, pj.job.ID, r.queue)
		}
		s.plan.Preemptions = append(s.plan.Preemptions, Preemption{AttemptID: r.attempt.ID, JobID: r.job.ID, AttemptVersion: r.attempt.Version,
			ForJobID: pj.job.ID, Reason: why, WorkLost: r.lost})
		names = append(names, r.job.ID)
	}
	v.Reasons = append([]Reason{{Scope: "job", Message: fmt.Sprintf("preempting %s; starts once they save a checkpoint and stop", strings.Join(names, ", "))}}, v.Reasons...)
	return true
}

type noVictimsKey struct {
	f          *feasibility
	q          *queueState
	prio       int
	gen        uint64
	preemptors int
}

// victimsFor collects the work pj may preempt on its feasible classes:
// lower-priority preemptible work of its own queue, and work of cohort
// queues that borrow while pj's queue stays within its nominal quota; and
// the attempts already releasing GPUs there for pj (or for no one). Each
// (class, queue) list is read for at most maxVictimsExamined entries, in
// victim order, so the work is bounded by classes × queues, not by the
// live attempts.
func (s *sched) victimsFor(pj *pjob, f *feasibility) (cands, releasing []*liveRef) {
	li := s.liveIdx()
	q := pj.q
	need := float64(pj.g * pj.job.Spec.Replicas)
	if pj.share > 0 {
		need = pj.share * float64(pj.job.Spec.Replicas)
	}
	var seen map[*liveRef]bool
	add := func(list *[]*liveRef, r *liveRef) {
		if seen == nil {
			seen = map[*liveRef]bool{}
		}
		if !seen[r] {
			seen[r] = true
			*list = append(*list, r)
		}
	}
	for _, ci := range f.classes {
		for i, r := range li.releasing[ci] {
			if i >= maxVictimsExamined {
				break
			}
			if !s.victimTaken[r.attempt.ID] && !s.nominatedToOthers(r, pj.job.ID) {
				add(&releasing, r)
			}
		}
		byQueue := li.victims[ci]
		if len(byQueue) == 0 {
			continue
		}
		// Own queue: lower priority only; the list is by priority.
		for i, r := range byQueue[q.name] {
			if i >= maxVictimsExamined || r.prio >= pj.prio {
				break
			}
			if !s.victimTaken[r.attempt.ID] {
				add(&cands, r)
			}
		}
		if q.cohort == nil {
			continue
		}
		// Reclaim: cohort queues over their own quota, while pj's queue
		// would stay within its own.
		m := s.c.classes[ci].gpuModel
		if qk := q.quotaKey(m); q.used[qk]+need > q.nominal[qk]+eps {
			continue
		}
		for _, vq := range s.order {
			if vq == q || vq.cohort != q.cohort || vq.unlimited {
				continue
			}
			if k := vq.quotaKey(m); vq.used[k] <= vq.nominal[k]+eps {
				continue // within its own quota on this class's model
			}
			for i, r := range byQueue[vq.name] {
				if i >= maxVictimsExamined {
					break
				}
				if s.victimTaken[r.attempt.ID] {
					continue
				}
				key := vq.quotaKey(r.gpuMdl)
				if vq.used[key] <= vq.nominal[key]+eps {
					continue
				}
				if qk := q.quotaKey(r.gpuMdl); q.used[qk]+need > q.nominal[qk]+eps {
					continue
				}
				add(&cands, r)
			}
		}
	}
	return cands, releasing
}

// ReasonNonPreemptible codes a verdict line saying the only work a job
// could preempt is of non-preemptible classes.
const ReasonNonPreemptible = "non-preemptible"

// explainFixed adds, when pj found no victims, whether lower-priority work
// of its queue holds its nodes in classes that are not preemptible: the
// job would preempt it, but policy forbids.
func (s *sched) explainFixed(pj *pjob, f *feasibility, v *Verdict) {
	if pj.q.minFixed >= pj.prio {
		return
	}
	// Non-preemptible work is never taken in a pass, so the answer holds
	// for every job of the same queue, priority and feasible classes.
	key := fixedKey{pj.q, pj.prio, f}
	r, ok := s.fixed[key]
	if !ok {
		r = s.fixedReason(pj, f)
		if s.fixed == nil {
			s.fixed = map[fixedKey]*Reason{}
		}
		s.fixed[key] = r
	}
	if r != nil {
		v.Reasons = append(v.Reasons, *r)
	}
}

type fixedKey struct {
	q    *queueState
	prio int
	f    *feasibility
}

func (s *sched) fixedReason(pj *pjob, f *feasibility) *Reason {
	inClass := make(map[int32]bool, len(f.classes))
	for _, ci := range f.classes {
		inClass[ci] = true
	}
	n := 0
	var classes []string
	for _, r := range s.liveIdx().all {
		if r.preempt || r.stopping || r.queue != pj.q.name || r.prio >= pj.prio || !s.onClasses(r, inClass) {
			continue
		}
		n++
		if !slices.Contains(classes, r.class) {
			classes = append(classes, r.class)
		}
	}
	if n == 0 {
		return nil
	}
	sort.Strings(classes)
	return &Reason{Scope: "job", Code: ReasonNonPreemptible, Message: fmt.Sprintf(
		"would preempt only non-preemptible work: %d lower-priority attempts on matching nodes are of class %s, which is not preemptible",
		n, strings.Join(classes, ", "))}
}

func (s *sched) onClasses(r *liveRef, inClass map[int32]bool) bool {
	for _, nm := range r.masks {
		if inClass[s.c.nodes[nm.node].cls] {
			return true
		}
	}
	return false
}

// fitsWith reports whether pj would fit if the victims' GPUs, CPU, memory
// and quota were free. It changes nothing.
func (s *sched) fitsWith(pj *pjob, f *feasibility, victims []*liveRef) bool {
	mark := len(s.undo)
	type quotaUndo struct {
		q   *queueState
		key string
		amt float64
	}
	var qu []quotaUndo
	for _, r := range victims {
		res := r.job.Spec.Resources
		for _, nm := range r.masks {
			ni, m := nm.node, nm.mask
			ns := &s.c.nodes[ni]
			s.undo = append(s.undo, undoEntry{node: ni, free: ns.free, cpu: ns.cpu, mem: ns.mem, share: -1})
			ns.cpu += res.CPU
			ns.mem += res.Memory
			s.c.setFree(ni, ns.free|m)
		}
		if vq := s.queues[r.queue]; vq != nil && !vq.unlimited {
			key := vq.quotaKey(r.gpuMdl)
			vq.used[key] -= r.gpus
			if vq.cohort != nil {
				vq.cohort.used[key] -= r.gpus
			}
			qu = append(qu, quotaUndo{vq, key, r.gpus})
		}
		if vp := s.projects[r.job.Project]; vp != nil {
			vp.charge(r.gpuMdl, -r.gpus)
			defer vp.charge(r.gpuMdl, r.gpus)
		}
	}
	p, _ := s.place(pj, f)
	s.rollback(mark)
	for _, u := range qu {
		u.q.used[u.key] += u.amt
		if u.q.cohort != nil {
			u.q.cohort.used[u.key] += u.amt
		}
	}
	_ = p
	return p != nil
}
