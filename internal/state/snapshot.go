package state

import (
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Snapshot is an immutable, consistent view of the state at one Version.
// Nothing in it may be modified.
type Snapshot struct {
	Version uint64
	// Pending holds queued jobs in acceptance order (Seq).
	Pending []*model.Job
	// PendingGen changes whenever a queued job's record is put (a new
	// one, one replaced or changed in place, one leaving the queue): two
	// snapshots of one State with the same PendingGen have the same
	// pending records, unchanged. 0: unknown (a snapshot not taken from
	// a State).
	PendingGen uint64
	// InPlaceGen changes whenever a job's record already stored is stored
	// again (changed in place, as the controller never does): between two
	// snapshots of one State with the same InPlaceGen, a record in both
	// pending lists is unchanged.
	InPlaceGen uint64
	// Nodes are the nodes that are not terminated, ordered by id.
	Nodes []NodeView
	// Live holds starting and running attempts, ordered by id; LiveJobs[i]
	// is the job of Live[i].
	Live     []*model.Attempt
	LiveJobs []*model.Job
	// Queues are the declared queues, by name. A job naming a queue that
	// is not here runs in the implicit default queue if it names
	// model.DefaultQueue, and waits with a verdict otherwise.
	Queues []*model.Queue
	// QueueUse is the GPUs live attempts hold, by queue then GPU model.
	QueueUse map[string]map[string]float64
	// ProjectQuota is each declared project's GPU quota by GPU model (or
	// model.AnyGPU for any model it does not list); ProjectUse is the GPUs
	// live attempts hold, by project then GPU model.
	ProjectQuota map[string]map[string]float64
	ProjectUse   map[string]map[string]float64
	// PriorityClasses are the fleet's declared classes, resolved before
	// the built-in ones (model.ResolvePriorityClass).
	PriorityClasses []model.PriorityClass
	// Usage is each queue's decayed past GPU-hours, for fair share;
	// HalfLife is the decay the scheduler applies up to its now.
	Usage    map[string]DecayedUsage
	HalfLife time.Duration
	// Finished maps jobs that Pending jobs depend on (spec.after) to their
	// state, when it is terminal; a missing id has not finished (or does
	// not exist: see Known).
	Finished map[string]model.JobState
	// Known is false for a dependency id that names no job.
	Known map[string]bool
	// Nominations are GPUs preemption is freeing for queued jobs, by job
	// id; the scheduler gives them to no other job until they expire.
	Nominations []Nomination
	// Holds are the budgets' holds on queued jobs; the state leaves it
	// empty, the controller sets it from its budget passes.
	Holds []Hold
	// Datasets maps a node's id to the digests (model.DataDigest) of the
	// datasets its data cache holds, as its agent reports them; the
	// controller sets it. Shared: the scheduler must not change it.
	Datasets map[string]map[string]bool
}

// NodeView is a node and what is free on it.
type NodeView struct {
	Node *model.Node
	// Free lists the indexes of GPUs no live attempt holds, ascending.
	Free []int
	// FreeMask has bit i set when GPU index i (< 64) is free.
	FreeMask   uint64
	FreeCPU    float64
	FreeMemory model.Bytes
	// Shared maps a shared GPU's index to the fraction live attempts hold.
	Shared map[int]float64
	// AllocVersion changes whenever GPUs on the node are taken or freed.
	AllocVersion uint64
	// ShapeID numbers the node's ShapeKey within this State (from 1):
	// nodes with equal ids are interchangeable to the scheduler.
	ShapeID int
	// Shape is the node's ShapeKey when ShapeID is set (interned: the
	// scheduler keys its node classes by it without building it again).
	Shape string
}

// Snapshot returns the current view. Node views are cached per node and
// rebuilt only for nodes that changed, so a snapshot of a large, quiet
// fleet costs a copy of its node views.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{Version: s.version, Pending: s.sortedPending(), PendingGen: s.pendingGen, InPlaceGen: s.inPlaceGen, HalfLife: s.halfLife}
	// Terminated nodes hold nothing and take nothing: left out.
	order := s.activeNodes()
	snap.Nodes = make([]NodeView, len(order))
	for i, e := range order {
		if !e.viewOK {
			e.view = e.buildView()
			if e.shapeOf != e.node {
				key := ShapeKey(e.node)
				id, ok := s.shapes[key]
				if !ok {
					id = len(s.shapes) + 1
					s.shapes[key] = id
					s.shapeKeys = append(s.shapeKeys, key)
				}
				e.shapeID, e.shapeOf = id, e.node
			}
			e.view.ShapeID = e.shapeID
			e.view.Shape = s.shapeKeys[e.shapeID-1]
			e.viewOK = true
		}
		snap.Nodes[i] = e.view
	}
	snap.Live = s.LiveAttempts()
	snap.LiveJobs = make([]*model.Job, len(snap.Live))
	for i, a := range snap.Live {
		snap.LiveJobs[i] = s.jobs[a.JobID]
	}
	snap.Queues = s.Queues()
	snap.QueueUse = make(map[string]map[string]float64, len(s.queueUse))
	for q, use := range s.queueUse {
		c := make(map[string]float64, len(use))
		for m, v := range use {
			c[m] = v
		}
		snap.QueueUse[q] = c
	}
	snap.ProjectQuota = s.projectQuota
	snap.PriorityClasses = s.priorityClasses
	snap.ProjectUse = copyUse(s.projectUse)
	snap.Usage = make(map[string]DecayedUsage, len(s.usage))
	for q, u := range s.usage {
		snap.Usage[q] = u
	}
	for _, n := range s.nominations {
		snap.Nominations = append(snap.Nominations, n)
	}
	sort.Slice(snap.Nominations, func(i, j int) bool { return snap.Nominations[i].JobID < snap.Nominations[j].JobID })
	for _, j := range snap.Pending {
		for _, d := range j.Spec.After {
			if snap.Known == nil {
				snap.Known, snap.Finished = map[string]bool{}, map[string]model.JobState{}
			}
			st, known, done := s.depState(d.Job)
			snap.Known[d.Job] = known
			if done {
				snap.Finished[d.Job] = st
			}
		}
	}
	return snap
}

func copyUse(use map[string]map[string]float64) map[string]map[string]float64 {
	out := make(map[string]map[string]float64, len(use))
	for k, u := range use {
		c := make(map[string]float64, len(u))
		for m, v := range u {
			c[m] = v
		}
		out[k] = c
	}
	return out
}

func (e *nodeEntry) buildView() NodeView {
	nv := NodeView{
		Node:         e.node,
		FreeCPU:      e.node.CPU - e.usedCPU,
		FreeMemory:   e.node.Memory - e.usedMem,
		AllocVersion: e.allocVersion,
	}
	for _, g := range e.node.GPUs {
		if e.holder[g.Index] == "" && e.share[g.Index] == 0 {
			nv.Free = append(nv.Free, g.Index)
			if g.Index >= 0 && g.Index < 64 {
				nv.FreeMask |= 1 << uint(g.Index)
			}
		}
	}
	sort.Ints(nv.Free)
	if len(e.share) > 0 {
		nv.Shared = make(map[int]float64, len(e.share))
		for g, v := range e.share {
			nv.Shared[g] = v
		}
	}
	return nv
}

// depState is the state of a dependency: a job, or an array job, which is
// done when every task is and succeeded only when every task did.
func (s *State) depState(id string) (st model.JobState, known, done bool) {
	if dep, ok := s.jobs[id]; ok {
		return dep.State, true, dep.State.Terminal()
	}
	tasks := s.arrays[id]
	if len(tasks) == 0 {
		return "", false, false
	}
	st = model.JobSucceeded
	for _, tid := range tasks {
		t := s.jobs[tid]
		if !t.State.Terminal() {
			return "", true, false
		}
		if t.State != model.JobSucceeded {
			st = model.JobFailed
		}
	}
	return st, true, true
}
