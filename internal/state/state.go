package state

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// State is the controller's in-memory model. The zero value is not usable;
// call New.
type State struct {
	jobs     map[string]*model.Job
	attempts map[string]*model.Attempt
	// live maps a job id to its starting or running attempt.
	live map[string]*model.Attempt
	// liveSorted holds live's attempts ordered by id (LiveAttempts),
	// kept in step by setLive rather than sorted at each snapshot.
	liveSorted []*model.Attempt
	// nodeStates increases whenever a node is added or its State changes
	// (NodeStateGen).
	nodeStates uint64
	// activeList is ActiveNodes' answer until the next PutNode; nil:
	// not built.
	activeList []*model.Node
	nodes      map[string]*nodeEntry
	// liveOn indexes live by node: node id → attempt id → the attempt,
	// for every node one of its replicas is on, so that a node's desired
	// set costs its own attempts, not every live one.
	liveOn map[string]map[string]*model.Attempt

	// pending holds queued jobs; pendingOrder keeps them by Seq with lazy
	// deletion: gone holds the records in it that left the queue or were
	// replaced, so a submission is O(1), a snapshot of an unchanged queue
	// O(1) (it shares the list, which is never written below its length
	// again: compaction makes a new one), and one after removals
	// O(pending) without a lookup by id.
	pending      map[string]*model.Job
	pendingOrder []*model.Job
	gone         map[*model.Job]bool
	orderDirty   bool
	// pendingGen counts puts of queued records (new, replaced, changed in
	// place, leaving the queue): Snapshot.PendingGen; jobGen counts
	// every put of a job (JobGen); inPlaceGen every put of a record
	// already stored (Snapshot.InPlaceGen).
	pendingGen, jobGen, inPlaceGen uint64

	counts map[model.JobState]int
	// version increases with every change, so a snapshot can be labelled.
	version uint64

	// orphans holds live attempts with replicas on nodes not yet known, by
	// node id, so a registering node picks up their holds without a scan of
	// every live attempt.
	orphans map[string][]*model.Attempt
	// shapes interns node ShapeKeys; shapeKeys[id-1] is id's key.
	shapes    map[string]int
	shapeKeys []string

	// nodeOrder is every node sorted by id; activeOrder the nodes that
	// are not terminated, sorted by id. Both are kept in step with every
	// PutNode (a binary search and an insert or delete), never rebuilt: a
	// long-lived fleet ends thousands of nodes, and loops over the live
	// ones must not walk or sort them all.
	nodeOrder, activeOrder []*nodeEntry
	// stopped holds the terminated nodes that have a stop time, by
	// (StoppedAt, id), so "what stopped after t" (the meter's window)
	// costs the recent ones only.
	stopped []*nodeEntry
	// unpooled holds the nodes of a provider instance (LabelInstance) that
	// belong to no pool, by id: what the scale loop owns beyond its pools.
	unpooled []*nodeEntry

	queues map[string]*model.Queue
	// queueUse is the GPUs live attempts hold, by queue and GPU model,
	// kept in step with every attempt change so a snapshot copies it.
	queueUse map[string]map[string]float64
	// projectQuota is each project's Project.spec.quota (replaced, never
	// modified, so snapshots share it); projectUse the GPUs live attempts
	// hold, by project and GPU model, kept like queueUse.
	projectQuota map[string]map[string]float64
	projectUse   map[string]map[string]float64
	// priorityClasses are the fleet's declared classes (replaced, never
	// modified).
	priorityClasses []model.PriorityClass
	// usage is each queue's decayed GPU-hours (fair share's history).
	usage    map[string]DecayedUsage
	halfLife time.Duration

	// arrays maps an array id to the ids of its tasks.
	arrays map[string][]string
	// nominations holds GPUs freed by preemption for the queued job they
	// were freed for, by job id. In memory only: after a restart the
	// preemptor competes for the GPUs like any other job.
	nominations map[string]Nomination
}

// Nomination reserves GPUs that preemption is freeing for the job it
// preempted for (JobID), so another job cannot take them first. It ends
// when the job leaves the queue (bound or cancelled) or at Expires.
type Nomination struct {
	JobID   string
	GPUs    []NodeGPUs
	Expires time.Time
}

// NodeGPUs names GPUs of one node.
type NodeGPUs struct {
	NodeID string
	GPUs   []int
}

// DecayedUsage is GPU-hours decayed with a half-life, as of At.
type DecayedUsage struct {
	GPUHours float64   `json:"gpuHours"`
	At       time.Time `json:"at"`
}

// Decay returns u's value at t under halfLife (0 means no decay).
func (u DecayedUsage) Decay(t time.Time, halfLife time.Duration) float64 {
	if halfLife <= 0 || !t.After(u.At) {
		return u.GPUHours
	}
	return u.GPUHours * math.Exp2(-float64(t.Sub(u.At))/float64(halfLife))
}

// DefaultHalfLife is how fast past usage fades from fair share (Slurm's
// PriorityDecayHalfLife defaults to 7 days; GPU queues turn over faster).
const DefaultHalfLife = 24 * time.Hour

type nodeEntry struct {
	node *model.Node
	// holder[i] is the attempt id holding GPU index i, or "".
	holder  map[int]string
	usedCPU float64
	usedMem model.Bytes
	// allocVersion increases whenever GPUs on the node are taken or freed.
	allocVersion uint64
	// share[i] is the fraction of shared GPU i held by live attempts.
	share map[int]float64
	// shapeID is the interned ShapeKey of shapeOf.
	shapeID int
	shapeOf *model.Node
	// view caches the node's NodeView; valid while viewOK.
	view   NodeView
	viewOK bool
}

// New returns an empty State.
func New() *State {
	return &State{
		jobs:     map[string]*model.Job{},
		attempts: map[string]*model.Attempt{},
		live:     map[string]*model.Attempt{},
		liveOn:   map[string]map[string]*model.Attempt{},
		nodes:    map[string]*nodeEntry{},
		pending:  map[string]*model.Job{},
		counts:   map[model.JobState]int{},
		queues:   map[string]*model.Queue{},
		orphans:  map[string][]*model.Attempt{},
		shapes:   map[string]int{},
		queueUse: map[string]map[string]float64{},

		projectUse: map[string]map[string]float64{},
		usage:      map[string]DecayedUsage{},
		halfLife:   DefaultHalfLife,

		arrays:      map[string][]string{},
		nominations: map[string]Nomination{},
	}
}

// SetHalfLife sets how fast past usage decays (0: never).
func (s *State) SetHalfLife(d time.Duration) { s.version++; s.halfLife = d }

// HalfLife returns the usage decay half-life.
func (s *State) HalfLife() time.Duration { return s.halfLife }

// PutQueue stores q, replacing any earlier version.
func (s *State) PutQueue(q *model.Queue) { s.version++; s.queues[q.Name] = q }

// DeleteQueue forgets a queue; jobs that name it wait with a verdict.
func (s *State) DeleteQueue(name string) { s.version++; delete(s.queues, name) }

// Queue returns a queue by name.
func (s *State) Queue(name string) (*model.Queue, bool) {
	q, ok := s.queues[name]
	return q, ok
}

// Queues returns every stored queue, by name.
func (s *State) Queues() []*model.Queue {
	out := make([]*model.Queue, 0, len(s.queues))
	for _, q := range s.queues {
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// QueueUse returns the GPUs live attempts of a queue hold, by GPU model.
func (s *State) QueueUse(queue string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.queueUse[queue] {
		out[k] = v
	}
	return out
}

// SetProjectQuotas replaces the declared projects' GPU quotas: project →
// GPU model (or model.AnyGPU) → GPUs. The map is kept, not copied: the
// caller must not modify it afterwards.
func (s *State) SetProjectQuotas(q map[string]map[string]float64) {
	s.version++
	s.projectQuota = q
}

// SetPriorityClasses replaces the declared priority classes; the slice is
// kept, not copied.
func (s *State) SetPriorityClasses(pcs []model.PriorityClass) {
	s.version++
	s.priorityClasses = pcs
}

// PriorityClasses returns the declared priority classes (not the built-in
// ones); the caller must not modify them.
func (s *State) PriorityClasses() []model.PriorityClass { return s.priorityClasses }

// ProjectUse returns the GPUs live attempts of a project hold, by GPU model.
func (s *State) ProjectUse(project string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.projectUse[project] {
		out[k] = v
	}
	return out
}

// AddUsage adds GPU-hours to a queue's decayed usage at time at.
func (s *State) AddUsage(queue string, gpuHours float64, at time.Time) {
	s.version++
	u := s.usage[queue]
	if at.Before(u.At) {
		at = u.At
	}
	s.usage[queue] = DecayedUsage{GPUHours: u.Decay(at, s.halfLife) + gpuHours, At: at}
}

// Usage returns a queue's decayed usage record.
func (s *State) Usage(queue string) DecayedUsage { return s.usage[queue] }

// hold adds (sign +1) or removes (-1) the GPUs and CPU of replica r of job
// on node entry e, and the queue's use.
func (s *State) hold(e *nodeEntry, attemptID string, r model.Replica, job *model.Job, sign float64) {
	for _, g := range r.GPUs {
		if r.GPUShare > 0 {
			e.share[g] += sign * r.GPUShare
			if e.share[g] <= 1e-9 {
				delete(e.share, g)
			}
		} else if sign > 0 {
			e.holder[g] = attemptID
		} else if e.holder[g] == attemptID {
			delete(e.holder, g)
		}
	}
	if job != nil {
		e.usedCPU += sign * job.Spec.Resources.CPU
		e.usedMem += model.Bytes(sign) * job.Spec.Resources.Memory
		for _, g := range r.GPUs {
			m := gpuModel(e.node, g)
			amount := 1.0
			if r.GPUShare > 0 {
				amount = r.GPUShare
			}
			addUse(s.queueUse, job.Spec.Queue, m, sign*amount)
			addUse(s.projectUse, job.Project, m, sign*amount)
		}
	}
	e.viewOK = false
}

// addUse adds amount GPUs of model m to use[key], dropping what reaches 0.
func addUse(use map[string]map[string]float64, key, m string, amount float64) {
	u := use[key]
	if u == nil {
		u = map[string]float64{}
		use[key] = u
	}
	u[m] += amount
	if u[m] <= 1e-9 {
		delete(u, m)
		if len(u) == 0 {
			delete(use, key)
		}
	}
}

func gpuModel(n *model.Node, idx int) string {
	if idx >= 0 && idx < len(n.GPUs) && n.GPUs[idx].Index == idx {
		return n.GPUs[idx].Model
	}
	for _, g := range n.GPUs {
		if g.Index == idx {
			return g.Model
		}
	}
	return ""
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

// EachPending calls fn for every queued job, in no order: what a caller
// that only looks at the queue reads instead of every job ever accepted.
func (s *State) EachPending(fn func(*model.Job)) {
	for _, j := range s.pending {
		fn(j)
	}
}

// Nodes returns every node, ordered by id.
func (s *State) Nodes() []*model.Node {
	order := s.sortedNodes()
	out := make([]*model.Node, len(order))
	for i, e := range order {
		out[i] = e.node
	}
	return out
}

// NodeStateGen is a number that changes whenever a node is added or any
// node's State changes (and at no other put), so a caller that follows
// nodes' states can tell that none moved without reading each.
func (s *State) NodeStateGen() uint64 { return s.nodeStates }

// ActiveNodes returns the nodes that are not terminated, ordered by id.
// The slice is shared by the calls between two puts of a node (a scale
// cycle, a cost pass and the next wake each walk every node, and a large
// owned fleet rarely changes): a caller must not write its elements, and
// an append copies it.
func (s *State) ActiveNodes() []*model.Node {
	if s.activeList == nil {
		order := s.activeNodes()
		s.activeList = make([]*model.Node, len(order))
		for i, e := range order {
			s.activeList[i] = e.node
		}
	}
	return s.activeList[:len(s.activeList):len(s.activeList)]
}

func (s *State) sortedNodes() []*nodeEntry { return s.nodeOrder }

func (s *State) activeNodes() []*nodeEntry { return s.activeOrder }

// insertNode puts e into order (sorted by node id).
func insertNode(order []*nodeEntry, e *nodeEntry) []*nodeEntry {
	i, _ := slices.BinarySearchFunc(order, e.node.ID, func(x *nodeEntry, id string) int { return strings.Compare(x.node.ID, id) })
	return slices.Insert(order, i, e)
}

// removeNode takes the entry with id out of order (sorted by node id).
func removeNode(order []*nodeEntry, id string) []*nodeEntry {
	i, ok := slices.BinarySearchFunc(order, id, func(x *nodeEntry, id string) int { return strings.Compare(x.node.ID, id) })
	if !ok {
		return order
	}
	return slices.Delete(order, i, i+1)
}

func unpooled(n *model.Node) bool { return n.Pool == "" && n.Labels[model.LabelInstance] != "" }

// UnpooledInstances returns the nodes, terminated or not, of a provider
// instance (model.LabelInstance) that belong to no pool, ordered by id.
func (s *State) UnpooledInstances() []*model.Node {
	out := make([]*model.Node, len(s.unpooled))
	for i, e := range s.unpooled {
		out[i] = e.node
	}
	return out
}

// stoppedKey reports whether n belongs in State.stopped.
func stoppedKey(n *model.Node) bool { return n.State == model.NodeTerminated && !n.StoppedAt.IsZero() }

func cmpStopped(x *model.Node, at time.Time, id string) int {
	if c := x.StoppedAt.Compare(at); c != 0 {
		return c
	}
	return strings.Compare(x.ID, id)
}

func insertStopped(order []*nodeEntry, e *nodeEntry) []*nodeEntry {
	i, _ := slices.BinarySearchFunc(order, e.node, func(x *nodeEntry, n *model.Node) int { return cmpStopped(x.node, n.StoppedAt, n.ID) })
	return slices.Insert(order, i, e)
}

func removeStopped(order []*nodeEntry, n *model.Node) []*nodeEntry {
	i, ok := slices.BinarySearchFunc(order, n, func(x *nodeEntry, n *model.Node) int { return cmpStopped(x.node, n.StoppedAt, n.ID) })
	if !ok {
		return order
	}
	return slices.Delete(order, i, i+1)
}

// NodesStoppedAfter returns the terminated nodes whose stop time is after
// t, ordered by stop time: with ActiveNodes, every node a provider may
// bill after t, without a walk over every node that ever ended.
func (s *State) NodesStoppedAfter(t time.Time) []*model.Node {
	i, _ := slices.BinarySearchFunc(s.stopped, t, func(x *nodeEntry, t time.Time) int {
		if x.node.StoppedAt.After(t) {
			return 1
		}
		return -1
	})
	out := make([]*model.Node, 0, len(s.stopped)-i)
	for _, e := range s.stopped[i:] {
		out = append(out, e.node)
	}
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
	return append(make([]*model.Attempt, 0, len(s.liveSorted)), s.liveSorted...)
}

// keepLiveSorted replaces old by a in liveSorted (either may be nil).
func (s *State) keepLiveSorted(old, a *model.Attempt) {
	find := func(id string) (int, bool) {
		return slices.BinarySearchFunc(s.liveSorted, id, func(x *model.Attempt, id string) int { return strings.Compare(x.ID, id) })
	}
	if old != nil {
		if i, ok := find(old.ID); ok {
			s.liveSorted = slices.Delete(s.liveSorted, i, i+1)
		}
	}
	if a != nil {
		if i, ok := find(a.ID); ok {
			s.liveSorted[i] = a
		} else {
			s.liveSorted = slices.Insert(s.liveSorted, i, a)
		}
	}
}

// LiveCount is the number of starting or running attempts.
func (s *State) LiveCount() int { return len(s.live) }

// EachLiveAttempt calls fn for every starting or running attempt, in no
// particular order. fn must not change s.
func (s *State) EachLiveAttempt(fn func(*model.Attempt)) {
	for _, a := range s.live {
		fn(a)
	}
}

// LiveAttemptsOn calls fn for every starting or running attempt with a
// replica on node nodeID, each once, in no particular order, until fn
// returns false. fn must not change s.
func (s *State) LiveAttemptsOn(nodeID string, fn func(*model.Attempt) bool) {
	for _, a := range s.liveOn[nodeID] {
		if !fn(a) {
			return
		}
	}
}

// setLive makes a the live attempt of its job (nil: the job has none),
// keeping liveOn in step with live.
func (s *State) setLive(jobID string, a *model.Attempt) {
	s.keepLiveSorted(s.live[jobID], a)
	if old, ok := s.live[jobID]; ok {
		for _, r := range old.Replicas {
			if m := s.liveOn[r.NodeID]; m != nil {
				delete(m, old.ID)
				if len(m) == 0 {
					delete(s.liveOn, r.NodeID)
				}
			}
		}
	}
	if a == nil {
		delete(s.live, jobID)
		return
	}
	s.live[jobID] = a
	for _, r := range a.Replicas {
		m := s.liveOn[r.NodeID]
		if m == nil {
			m = map[string]*model.Attempt{}
			s.liveOn[r.NodeID] = m
		}
		m[a.ID] = a
	}
}

// PutJob stores j, replacing any earlier version, and keeps the pending
// index and counts in step.
func (s *State) PutJob(j *model.Job) {
	s.version++
	s.jobGen++
	old, existed := s.jobs[j.ID]
	if existed {
		s.counts[old.State]--
		if old == j {
			s.inPlaceGen++
		}
	}
	s.counts[j.State]++
	s.jobs[j.ID] = j
	if !existed && j.ArrayID != "" {
		s.arrays[j.ArrayID] = append(s.arrays[j.ArrayID], j.ID)
	}
	if j.State != model.JobQueued {
		delete(s.nominations, j.ID)
	}
	old, wasPending := s.pending[j.ID]
	if wasPending || j.State == model.JobQueued {
		s.pendingGen++
	}
	if wasPending && old != j {
		s.leftQueue(old)
	}
	switch {
	case j.State == model.JobQueued:
		s.pending[j.ID] = j
		if !wasPending || old != j {
			if n := len(s.pendingOrder); (n > 0 && pendingLess(j, s.pendingOrder[n-1])) || s.gone[j] {
				// Out of order, or a record that left the queue coming
				// back (its old entry is marked gone): sort again.
				s.orderDirty = true
			}
			s.pendingOrder = append(s.pendingOrder, j)
		}
	case wasPending:
		delete(s.pending, j.ID)
		if old == j {
			s.leftQueue(old)
		}
	}
}

// JobGen counts the jobs stored (PutJob): while it stands, every job
// reads as it did, so a caller may keep what it derived from jobs alone.
func (s *State) JobGen() uint64 { return s.jobGen }

// ArrayTasks returns the tasks of an array job, by index; none when id
// names no array.
func (s *State) ArrayTasks(id string) []*model.Job {
	ids := s.arrays[id]
	out := make([]*model.Job, 0, len(ids))
	for _, tid := range ids {
		out = append(out, s.jobs[tid])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ArrayIndex < out[j].ArrayIndex })
	return out
}

// Nominate adds GPUs to the nomination of a queued job, extending its
// expiry to the later of the two. It does nothing for a job that is not
// queued.
func (s *State) Nominate(n Nomination) {
	if j, ok := s.jobs[n.JobID]; !ok || j.State != model.JobQueued {
		return
	}
	s.version++
	if old, ok := s.nominations[n.JobID]; ok {
		n.GPUs = append(append([]NodeGPUs(nil), old.GPUs...), n.GPUs...)
		if old.Expires.After(n.Expires) {
			n.Expires = old.Expires
		}
	}
	s.nominations[n.JobID] = n
}

// ExpireNominations drops nominations that expired by now.
func (s *State) ExpireNominations(now time.Time) {
	for id, n := range s.nominations {
		if !now.Before(n.Expires) {
			s.version++
			delete(s.nominations, id)
		}
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
			s.setLive(a.JobID, nil)
		}
		return
	}
	s.setLive(a.JobID, a)
	for _, r := range a.Replicas {
		e, ok := s.nodes[r.NodeID]
		if !ok {
			// Node unknown (not yet re-registered); holds apply when it is.
			s.orphans[r.NodeID] = append(s.orphans[r.NodeID], a)
			continue
		}
		s.hold(e, a.ID, r, s.jobs[a.JobID], 1)
		e.allocVersion++
	}
}

func (s *State) release(a *model.Attempt) {
	for _, r := range a.Replicas {
		e, ok := s.nodes[r.NodeID]
		if !ok {
			continue
		}
		s.hold(e, a.ID, r, s.jobs[a.JobID], -1)
		e.allocVersion++
	}
}

// PutNode stores n. A node seen for the first time picks up the GPU holds of
// live attempts already placed on it (after a restart, attempts load before
// their node re-registers).
func (s *State) PutNode(n *model.Node) {
	s.version++
	s.activeList = nil
	e, ok := s.nodes[n.ID]
	if ok {
		was, is := e.node.State == model.NodeTerminated, n.State == model.NodeTerminated
		if e.node.State != n.State {
			s.nodeStates++
		}
		if stoppedKey(e.node) {
			s.stopped = removeStopped(s.stopped, e.node)
		}
		if wasU, isU := unpooled(e.node), unpooled(n); wasU && !isU {
			s.unpooled = removeNode(s.unpooled, n.ID)
		} else if isU && !wasU {
			s.unpooled = insertNode(s.unpooled, e)
		}
		e.node = n
		if stoppedKey(n) {
			s.stopped = insertStopped(s.stopped, e)
		}
		switch {
		case was && !is:
			s.activeOrder = insertNode(s.activeOrder, e)
		case !was && is:
			s.activeOrder = removeNode(s.activeOrder, n.ID)
		}
		e.viewOK = false
		return
	}
	e = &nodeEntry{node: n, holder: map[int]string{}, share: map[int]float64{}}
	s.nodes[n.ID] = e
	s.nodeStates++
	s.nodeOrder = insertNode(s.nodeOrder, e)
	if n.State != model.NodeTerminated {
		s.activeOrder = insertNode(s.activeOrder, e)
	}
	if stoppedKey(n) {
		s.stopped = insertStopped(s.stopped, e)
	}
	if unpooled(n) {
		s.unpooled = insertNode(s.unpooled, e)
	}
	seen := map[string]bool{}
	for _, a := range s.orphans[n.ID] {
		if cur, ok := s.live[a.JobID]; !ok || cur != s.attempts[a.ID] || seen[a.ID] {
			continue // ended or replaced since
		}
		seen[a.ID] = true
		a = s.attempts[a.ID]
		for _, r := range a.Replicas {
			if r.NodeID == n.ID {
				s.hold(e, a.ID, r, s.jobs[a.JobID], 1)
			}
		}
	}
	delete(s.orphans, n.ID)
}

// GPUShareUsed returns the fraction of shared GPU g on a node that live
// attempts hold.
func (s *State) GPUShareUsed(nodeID string, g int) float64 {
	if e, ok := s.nodes[nodeID]; ok {
		return e.share[g]
	}
	return 0
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

// leftQueue marks the record j, in pendingOrder, as no longer queued.
func (s *State) leftQueue(j *model.Job) {
	if s.gone == nil {
		s.gone = map[*model.Job]bool{}
	}
	s.gone[j] = true
}

// sortedPending is the queued jobs by Seq, then ID (pendingLess). The list is shared with
// earlier snapshots while the queue is unchanged; callers must not
// modify it.
func (s *State) sortedPending() []*model.Job {
	switch {
	case s.orderDirty:
		kept := make([]*model.Job, 0, len(s.pending))
		for _, j := range s.pending {
			kept = append(kept, j)
		}
		sort.Slice(kept, func(a, b int) bool { return pendingLess(kept[a], kept[b]) })
		s.pendingOrder = kept
	case len(s.gone) > 0:
		// A new list: earlier snapshots share the old one.
		kept := make([]*model.Job, 0, len(s.pending))
		for _, j := range s.pendingOrder {
			if !s.gone[j] {
				kept = append(kept, j)
			}
		}
		s.pendingOrder = kept
	}
	s.orderDirty = false
	clear(s.gone)
	return slices.Clip(s.pendingOrder)
}

// pendingLess orders queued jobs by Seq, then ID: a total order, so jobs
// that share a Seq never come out in the pending map's random order.
func pendingLess(a, b *model.Job) bool {
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	return a.ID < b.ID
}
