package state

import (
	"sort"

	"github.com/gpufleet/gpufleet/internal/model"
)

// State is the controller's in-memory model. The zero value is not usable;
// call New.
type State struct {
	jobs     map[string]*model.Job
	attempts map[string]*model.Attempt
	// live maps a job id to its starting or running attempt.
	live  map[string]*model.Attempt
	nodes map[string]*nodeEntry

	// pending holds queued jobs; pendingOrder keeps them by Seq with lazy
	// deletion, so a submission is O(1) and a snapshot O(pending).
	pending      map[string]*model.Job
	pendingOrder []*model.Job
	orderDirty   bool

	counts map[model.JobState]int
	// version increases with every change, so a snapshot can be labelled.
	version uint64
}

type nodeEntry struct {
	node *model.Node
	// holder[i] is the attempt id holding GPU index i, or "".
	holder  map[int]string
	usedCPU float64
	usedMem model.Bytes
	// allocVersion increases whenever GPUs on the node are taken or freed.
	allocVersion uint64
}

// New returns an empty State.
func New() *State {
	return &State{
		jobs:     map[string]*model.Job{},
		attempts: map[string]*model.Attempt{},
		live:     map[string]*model.Attempt{},
		nodes:    map[string]*nodeEntry{},
		pending:  map[string]*model.Job{},
		counts:   map[model.JobState]int{},
	}
}

// Version returns the change counter.
func (s *State) Version() uint64 { return s.version }

// Job returns a job by id.
func (s *State) Job(id string) (*model.Job, bool) {
	j, ok := s.jobs[id]
	return j, ok
}

// Attempt returns an attempt by id.
func (s *State) Attempt(id string) (*model.Attempt, bool) {
	a, ok := s.attempts[id]
	return a, ok
}

// LiveAttempt returns the job's starting or running attempt.
func (s *State) LiveAttempt(jobID string) (*model.Attempt, bool) {
	a, ok := s.live[jobID]
	return a, ok
}

// Node returns a node by id.
func (s *State) Node(id string) (*model.Node, bool) {
	e, ok := s.nodes[id]
	if !ok {
		return nil, false
	}
	return e.node, true
}

// Counts returns the number of jobs in each state.
func (s *State) Counts() map[model.JobState]int {
	out := make(map[model.JobState]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// Jobs calls fn for every job until fn returns false. Order is unspecified.
func (s *State) Jobs(fn func(*model.Job) bool) {
	for _, j := range s.jobs {
		if !fn(j) {
			return
		}
	}
}

// Nodes returns every node, ordered by id.
func (s *State) Nodes() []*model.Node {
	out := make([]*model.Node, 0, len(s.nodes))
	for _, e := range s.nodes {
		out = append(out, e.node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AttemptsOf returns a job's attempts in order.
func (s *State) AttemptsOf(jobID string) []*model.Attempt {
	j, ok := s.jobs[jobID]
	if !ok {
		return nil
	}
	out := make([]*model.Attempt, 0, j.Attempts)
	for n := 1; n <= j.Attempts; n++ {
		if a, ok := s.attempts[model.AttemptID(jobID, n)]; ok {
			out = append(out, a)
		}
	}
	return out
}

// LiveAttempts returns every starting or running attempt.
func (s *State) LiveAttempts() []*model.Attempt {
	out := make([]*model.Attempt, 0, len(s.live))
	for _, a := range s.live {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// PutJob stores j, replacing any earlier version, and keeps the pending
// index and counts in step.
func (s *State) PutJob(j *model.Job) {
	s.version++
	old, existed := s.jobs[j.ID]
	if existed {
		s.counts[old.State]--
	}
	s.counts[j.State]++
	s.jobs[j.ID] = j
	_, wasPending := s.pending[j.ID]
	switch {
	case j.State == model.JobQueued:
		s.pending[j.ID] = j
		if !wasPending {
			if n := len(s.pendingOrder); n > 0 && s.pendingOrder[n-1].Seq > j.Seq {
				s.orderDirty = true
			}
			s.pendingOrder = append(s.pendingOrder, j)
		} else {
			s.orderDirty = true // same job, new version: refresh the pointer
		}
	case wasPending:
		delete(s.pending, j.ID)
	}
}

// PutAttempt stores a, replacing any earlier version, and moves GPU holds:
// a live attempt holds its replicas' GPUs, a finished one holds none.
func (s *State) PutAttempt(a *model.Attempt) {
	s.version++
	if old, ok := s.attempts[a.ID]; ok && !old.State.Terminal() {
		s.release(old)
	}
	s.attempts[a.ID] = a
	if a.State.Terminal() {
		if cur, ok := s.live[a.JobID]; ok && cur.ID == a.ID {
			delete(s.live, a.JobID)
		}
		return
	}
	s.live[a.JobID] = a
	for _, r := range a.Replicas {
		e, ok := s.nodes[r.NodeID]
		if !ok {
			continue // node unknown (not yet re-registered); holds apply when it is
		}
		for _, g := range r.GPUs {
			e.holder[g] = a.ID
		}
		job := s.jobs[a.JobID]
		if job != nil {
			e.usedCPU += job.Spec.Resources.CPU
			e.usedMem += job.Spec.Resources.Memory
		}
		e.allocVersion++
	}
}

func (s *State) release(a *model.Attempt) {
	for _, r := range a.Replicas {
		e, ok := s.nodes[r.NodeID]
		if !ok {
			continue
		}
		for _, g := range r.GPUs {
			if e.holder[g] == a.ID {
				delete(e.holder, g)
			}
		}
		if job := s.jobs[a.JobID]; job != nil {
			e.usedCPU -= job.Spec.Resources.CPU
			e.usedMem -= job.Spec.Resources.Memory
		}
		e.allocVersion++
	}
}

// PutNode stores n. A node seen for the first time picks up the GPU holds of
// live attempts already placed on it (after a restart, attempts load before
// their node re-registers).
func (s *State) PutNode(n *model.Node) {
	s.version++
	e, ok := s.nodes[n.ID]
	if ok {
		e.node = n
		return
	}
	e = &nodeEntry{node: n, holder: map[int]string{}}
	s.nodes[n.ID] = e
	for _, a := range s.live {
		for _, r := range a.Replicas {
			if r.NodeID != n.ID {
				continue
			}
			for _, g := range r.GPUs {
				e.holder[g] = a.ID
			}
			if job := s.jobs[a.JobID]; job != nil {
				e.usedCPU += job.Spec.Resources.CPU
				e.usedMem += job.Spec.Resources.Memory
			}
		}
	}
}

// GPUHolder returns the attempt holding GPU index g on a node, or "".
func (s *State) GPUHolder(nodeID string, g int) string {
	if e, ok := s.nodes[nodeID]; ok {
		return e.holder[g]
	}
	return ""
}

// FreeCPU returns the CPU and memory not held on a node.
func (s *State) FreeCPU(nodeID string) (cpu float64, mem model.Bytes) {
	e, ok := s.nodes[nodeID]
	if !ok {
		return 0, 0
	}
	return e.node.CPU - e.usedCPU, e.node.Memory - e.usedMem
}

func (s *State) sortedPending() []*model.Job {
	if s.orderDirty || len(s.pendingOrder) > 2*len(s.pending)+64 {
		kept := s.pendingOrder[:0]
		seen := make(map[string]bool, len(s.pending))
		for _, j := range s.pendingOrder {
			if cur, ok := s.pending[j.ID]; ok && !seen[j.ID] {
				seen[j.ID] = true
				kept = append(kept, cur)
			}
		}
		for id, j := range s.pending {
			if !seen[id] {
				kept = append(kept, j)
			}
		}
		sort.Slice(kept, func(a, b int) bool { return kept[a].Seq < kept[b].Seq })
		s.pendingOrder = kept
		s.orderDirty = false
	}
	out := make([]*model.Job, 0, len(s.pending))
	for _, j := range s.pendingOrder {
		if cur, ok := s.pending[j.ID]; ok && cur == j {
			out = append(out, j)
		}
	}
	return out
}
