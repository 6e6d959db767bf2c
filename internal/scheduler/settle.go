package scheduler

// settled reports whether the pass after this plan's commit would bind and
// preempt nothing and list the same candidates (Plan.Settled).
//
// That pass runs at the same time on the state this pass ended with: the
// same pending jobs less those bound, the same nodes, and as free exactly
// what this pass left free plus what its reservations held (reservations
// last one pass). Then:
//   - It binds nothing when no job that stayed queued after trying
//     placement fits there, which is checked below with the same placement
//     code. Every other refusal (holds, back-offs, dependencies, shapes no
//     node has, quota) depends on the time, the pending jobs or use that
//     only grows. Placement is monotone, since less free capacity never
//     fits a job that more did not, except past a bounded scan (scanLimit)
//     and with strict NVLink or NVSwitch picks, which leave a plan
//     unsettled, as do fractional gangs.
//   - It preempts nothing when every queued job stopped at the eligibility
//     test before any victim search (no cohort, nothing releasing, no
//     preemptible work of lower priority in its queue) and still would
//     with the work this pass bound counted as live.
//   - Its candidates are this plan's when one queue holds every pending
//     job. The queue's order does not change: aging moves all its jobs
//     alike. Across queues, fair share and the version-seeded ties may
//     reorder them.
//
// Nominations withhold GPUs in ways this does not follow, so a snapshot
// with any is not settled, nor is a plan that preempts. It runs once, at
// the end of a pass that bound something, and opens the pass's
// reservations: nothing may use the working cluster after it.
func (s *sched) settled() bool {
	if s.unsettled || len(s.plan.Bindings) == 0 || len(s.plan.Preemptions) > 0 || len(s.snap.Nominations) > 0 {
		return false
	}
	queues := 0
	for _, q := range s.order {
		if len(q.jobs) > 0 {
			queues++
		}
	}
	if queues > 1 {
		return false
	}
	if len(s.blocked) == 0 {
		return true
	}
	li := s.liveIdx()
	for _, r := range s.resv {
		if r.mask != 0 {
			s.c.setFree(r.node, s.c.nodes[r.node].free|r.mask)
		}
	}
	type key struct {
		fit  fitKey
		q    *queueState
		proj *projectState
	}
	// The memory's interned keys (Memory) tell most shapes apart without
	// hashing a fitKey; trying one shape twice answers alike.
	type interned struct {
		fit  *fitKey
		q    *queueState
		proj *projectState
	}
	tried := map[key]bool{}
	triedInterned := map[interned]bool{}
	for _, pj := range s.blocked {
		spec := &pj.job.Spec
		if ic := spec.Resources.GPU.Interconnect; ic == "nvlink" || ic == "nvswitch" {
			return false
		}
		if pj.share > 0 && spec.Replicas > 1 {
			return false
		}
		if (pj.g > 0 || pj.share > 0) && (pj.q.cohort != nil || li.nReleasing > 0 || pj.prio > min(pj.q.minLive, pj.q.minBound)) {
			return false
		}
		if pj.key != nil {
			k := interned{pj.key, pj.q, pj.proj}
			if triedInterned[k] {
				continue
			}
			triedInterned[k] = true
		} else {
			k := key{fitKeyOf(pj), pj.q, pj.proj}
			if tried[k] {
				continue
			}
			tried[k] = true
		}
		if p, _ := s.place(pj, s.feasible(pj)); p != nil || s.unsettled {
			return false
		}
	}
	return true
}
