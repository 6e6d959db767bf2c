package scheduler

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// liveIndex is the running work, by node, for reservations and
// preemption. Built once per pass on first need.
type liveIndex struct {
	all    []*liveRef
	byNode map[int32][]*liveRef
	// victims holds the preemptible work not already stopping, by node
	// class then queue, each list in the order preemption takes victims
	// (victimLess), so a preemptor reads a bounded prefix of the lists of
	// its own classes instead of every live attempt.
	victims map[int32]map[string][]*liveRef
	// releasing holds the attempts stopping as preempted, by class, and
	// nReleasing counts them.
	releasing  map[int32][]*liveRef
	nReleasing int
}

// victimLess orders preemption victims: lowest priority, then least work
// lost since their last checkpoint, then attempt id.
func victimLess(x, y *liveRef) bool {
	if x.prio != y.prio {
		return x.prio < y.prio
	}
	if x.lost != y.lost {
		return x.lost < y.lost
	}
	return x.attempt.ID < y.attempt.ID
}

type liveRef struct {
	attempt  *model.Attempt
	job      *model.Job
	queue    string
	prio     int
	class    string
	preempt  bool
	end      time.Time // zero: unknown
	lost     time.Duration
	masks    []nodeMask // by node, ascending
	gpus     float64
	gpuMdl   string
	stopping bool // already being preempted
}

func (s *sched) liveIdx() *liveIndex {
	if s.live != nil {
		return s.live
	}
	byID := make(map[string]int32, len(s.snap.Nodes))
	for i := range s.snap.Nodes {
		byID[s.snap.Nodes[i].Node.ID] = int32(i)
	}
	li := &liveIndex{byNode: map[int32][]*liveRef{}}
	for i, a := range s.snap.Live {
		j := s.snap.LiveJobs[i]
		if j == nil {
			continue
		}
		pc := classOf(s.snap.PriorityClasses, j.Spec.Priority)
		r := &liveRef{attempt: a, job: j, queue: j.Spec.Queue, prio: pc.Value, class: pc.Name, preempt: pc.Preemptible}
		r.stopping = a.Stop
		start := a.CreatedAt
		if a.StartedAt != nil {
			start = *a.StartedAt
		}
		if d := runtimeOf(j); d > 0 {
			r.end = start.Add(d)
		}
		from := start
		if j.LastCheckpoint != nil && j.LastCheckpoint.After(from) {
			from = *j.LastCheckpoint
		}
		if s.now.After(from) {
			r.lost = s.now.Sub(from)
		}
		for _, rep := range a.Replicas {
			ni, ok := byID[rep.NodeID]
			if !ok {
				continue
			}
			for _, g := range rep.GPUs {
				if g >= 0 && g < maxNodeGPUs && rep.GPUShare == 0 {
					r.addMask(ni, 1<<uint(g))
				}
			}
			if len(rep.GPUs) > 0 {
				r.gpuMdl = gpuModelOf(s.snap.Nodes[ni].Node, rep.GPUs[0])
			}
			r.gpus += float64(len(rep.GPUs))
			li.byNode[ni] = append(li.byNode[ni], r)
		}
		li.all = append(li.all, r)
		if q := s.queues[r.queue]; q != nil && !r.stopping {
			if r.preempt {
				q.minLive = min(q.minLive, r.prio)
			} else {
				q.minFixed = min(q.minFixed, r.prio)
			}
		}
		switch {
		case r.stopping && a.StopState == model.AttemptPreempted:
			li.nReleasing++
			for _, ci := range s.classesOf(r) {
				if li.releasing == nil {
					li.releasing = map[int32][]*liveRef{}
				}
				li.releasing[ci] = append(li.releasing[ci], r)
			}
		case !r.stopping && r.preempt:
			for _, ci := range s.classesOf(r) {
				if li.victims == nil {
					li.victims = map[int32]map[string][]*liveRef{}
				}
				byQueue := li.victims[ci]
				if byQueue == nil {
					byQueue = map[string][]*liveRef{}
					li.victims[ci] = byQueue
				}
				byQueue[r.queue] = append(byQueue[r.queue], r)
			}
		}
	}
	for _, byQueue := range li.victims {
		for _, l := range byQueue {
			sort.Slice(l, func(a, b int) bool { return victimLess(l[a], l[b]) })
		}
	}
	s.live = li
	return li
}

// nodeMask is the GPUs (bit i: index i) a live attempt holds on one node.
type nodeMask struct {
	node int32
	mask uint64
}

// addMask adds GPUs m on node ni to r's masks, kept by node: an attempt
// spans a few nodes, so a short sorted slice costs less than a map per
// attempt in every pass.
func (r *liveRef) addMask(ni int32, m uint64) {
	i, ok := slices.BinarySearchFunc(r.masks, ni, func(x nodeMask, n int32) int { return cmp.Compare(x.node, n) })
	if !ok {
		r.masks = slices.Insert(r.masks, i, nodeMask{node: ni})
	}
	r.masks[i].mask |= m
}

// maskOn is the GPUs r holds on node ni (0: none).
func (r *liveRef) maskOn(ni int32) uint64 {
	if i, ok := slices.BinarySearchFunc(r.masks, ni, func(x nodeMask, n int32) int { return cmp.Compare(x.node, n) }); ok {
		return r.masks[i].mask
	}
	return 0
}

// classesOf lists the classes of the nodes r runs on, each once.
func (s *sched) classesOf(r *liveRef) []int32 {
	var out []int32
	for _, nm := range r.masks {
		ci := s.c.nodes[nm.node].cls
		if !slices.Contains(out, ci) {
			out = append(out, ci)
		}
	}
	slices.Sort(out)
	return out
}

func gpuModelOf(n *model.Node, idx int) string {
	for _, g := range n.GPUs {
		if g.Index == idx {
			return g.Model
		}
	}
	return ""
}

// reservation holds currently free GPUs of one node for a blocked job
// from start on.
type reservation struct {
	node  int32
	mask  uint64
	start time.Time
	job   string
}

// ReasonNoEstimate codes a verdict line saying a blocked job has no
// estimated start.
const ReasonNoEstimate = "no-estimate"

// maxReservations bounds the blocked jobs that get reservations per pass.
const maxReservations = 16

// reserve gives the first blocked job of each queue a reservation: the
// nodes where running work (by its runtime estimates) frees enough GPUs
// soonest. Their free GPUs are withheld from later jobs unless those end
// before the reserved start (see backfill).
//
// A reservation must be feasible and in the future: on each node the
// running work is released in order of its estimated end until the job
// would fit there as placement checks it — its GPUs inside one NVLink
// domain when it asks for one, and its CPU and memory — and only work whose
// estimated end is still ahead counts (work past its estimate ends at an
// unknown time). A job that no such release lets start, or that is held
// by something other than running work (its start would be now), reserves
// nothing, so it never withholds GPUs that smaller jobs could use.
func (s *sched) reserve(pj *pjob, f *feasibility, v *Verdict) {
	if pj.q.reserved || len(s.resv) >= maxReservations*8 || pj.g == 0 || pj.share > 0 {
		return
	}
	pj.q.reserved = true // EASY: one try per queue and pass
	li := s.liveIdx()
	type cand struct {
		node int32
		at   time.Time
		mask uint64
	}
	res := &pj.job.Spec.Resources
	strict := res.GPU.Interconnect == "nvlink" || res.GPU.Interconnect == "nvswitch"
	overdue := false
	byDomain := map[int][]cand{}
	for _, ci := range f.classes {
		cl := s.c.classes[ci]
		for _, ni := range cl.nodes {
			ns := &s.c.nodes[ni]
			have, cpu, mem := ns.free, ns.cpu, ns.mem
			fit := func() (uint64, bool) {
				if cpu < res.CPU || mem < res.Memory {
					return 0, false
				}
				m, _, ok := cl.pickGPUs(have, pj.g, strict)
				return m, ok
			}
			at := s.now
			mask, ok := fit()
			if !ok {
				var sorted []*liveRef
				for _, r := range li.byNode[ni] {
					switch {
					case r.end.IsZero():
					case !r.end.After(s.now):
						overdue = true
					default:
						sorted = append(sorted, r)
					}
				}
				sort.Slice(sorted, func(a, b int) bool { return sorted[a].end.Before(sorted[b].end) })
				for _, r := range sorted {
					have |= r.maskOn(ni)
					cpu += r.job.Spec.Resources.CPU
					mem += r.job.Spec.Resources.Memory
					at = r.end
					if mask, ok = fit(); ok {
						break
					}
				}
				if !ok {
					continue
				}
			}
			byDomain[cl.domain] = append(byDomain[cl.domain], cand{node: ni, at: at, mask: mask})
		}
	}
	need := pj.job.Spec.Replicas
	var best []cand
	var bestAt time.Time
	for d := 0; d < len(s.c.domains); d++ {
		cs := byDomain[d]
		if len(cs) < need {
			continue
		}
		sort.SliceStable(cs, func(a, b int) bool { return cs[a].at.Before(cs[b].at) })
		at := cs[need-1].at
		if best == nil || at.Before(bestAt) {
			best, bestAt = cs[:need], at
		}
	}
	switch {
	case best == nil && overdue:
		v.Reasons = append(v.Reasons, Reason{Scope: "job", Code: ReasonNoEstimate, Message: "no estimated start: running work on matching nodes is past its runtime estimate, or has none"})
		return
	case best == nil:
		v.Reasons = append(v.Reasons, Reason{Scope: "job", Code: ReasonNoEstimate, Message: "no estimated start: no matching node frees room for the job (GPUs in one NVLink domain where asked, CPU, memory) by the runtime estimates of its running work"})
		return
	case !bestAt.After(s.now):
		return // it would fit now: what holds it is not running work
	}
	t := bestAt
	v.EstimatedStart = &t
	for _, c := range best {
		ns := &s.c.nodes[c.node]
		held := c.mask & ns.free
		if held != 0 {
			s.epoch++
			s.resv = append(s.resv, &reservation{node: c.node, mask: held, start: t, job: pj.job.ID})
			s.c.setFree(c.node, ns.free&^held)
		}
		s.plan.Reservations = append(s.plan.Reservations, Reservation{JobID: pj.job.ID, NodeID: s.c.node(c.node).ID, GPUs: indexes(c.mask), Start: t})
	}
}

// ReasonReserved codes a verdict line naming GPUs a reservation holds on
// the job's node group.
const ReasonReserved = "reserved"

// reservedReasons names the reservations that hold free GPUs on pj's
// feasible node groups: per group and blocked job, how many GPUs and until
// when.
func (s *sched) reservedReasons(pj *pjob, f *feasibility) []Reason {
	if len(s.resv) == 0 {
		return nil
	}
	inClass := make(map[int32]bool, len(f.classes))
	for _, ci := range f.classes {
		inClass[ci] = true
	}
	type key struct {
		cls int32
		job string
	}
	count := map[key]int{}
	start := map[key]time.Time{}
	var order []key
	for _, r := range s.resv {
		if r.mask == 0 || r.job == pj.job.ID {
			continue
		}
		k := key{s.c.nodes[r.node].cls, r.job}
		if !inClass[k.cls] {
			continue
		}
		if _, ok := count[k]; !ok {
			order = append(order, k)
		}
		count[k] += bits.OnesCount64(r.mask)
		start[k] = r.start
	}
	out := make([]Reason, 0, len(order))
	for _, k := range order {
		out = append(out, Reason{Scope: s.scopeOf(s.c.classes[k.cls]), Code: ReasonReserved, Message: fmt.Sprintf(
			"%d GPUs reserved for %s until its estimated start at %s; a job whose runtime estimate ends it by then may use them",
			count[k], k.job, start[k].UTC().Format(time.RFC3339))})
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// backfill tries pj again with the GPUs of reservations that start after
// pj would end (now + its runtime estimate): EASY backfill never delays a
// reserved start.
func (s *sched) backfill(pj *pjob, f *feasibility) *placement {
	end := s.now.Add(pj.runtime)
	var opened []*reservation
	for _, r := range s.resv {
		if r.mask != 0 && !end.After(r.start) {
			ns := &s.c.nodes[r.node]
			s.c.setFree(r.node, ns.free|r.mask)
			opened = append(opened, r)
		}
	}
	if len(opened) == 0 {
		return nil
	}
	mark := len(s.undo)
	p, _ := s.place(pj, f)
	// Close the reservations again; GPUs the backfilled job took stay
	// taken (it ends before the reserved start).
	_ = mark
	for _, r := range opened {
		ns := &s.c.nodes[r.node]
		s.c.setFree(r.node, ns.free&^r.mask)
	}
	if p != nil {
		// Reserved GPUs the job took leave the reservation's free mask
		// but were never in the node's free mask while closed; nothing
		// else to do.
		for _, rep := range p.replicas {
			for _, r := range opened {
				if s.c.node(r.node).ID == rep.NodeID {
					var m uint64
					for _, g := range rep.GPUs {
						m |= 1 << uint(g)
					}
					r.mask &^= m
				}
			}
		}
	}
	return p
}
