package simulate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

// runner plays the agent of every simulated node through the agent
// protocol, in process: a node whose instance runs registers
// (Controller.Register) with the offer's GPUs, then syncs
// (Controller.Sync) as a long-polling agent would: when it has something
// to report (a replica started, exited or checkpointed) or when its
// node's desired set moved (Controller.NodeStatus, the generation a
// long poll waits on; Controller.MovedNodes says which nodes to ask). A replica "runs" until its job's trace runtime is
// done, from where its attempt resumed; a job with a checkpoint interval
// uploads a checkpoint and tells the controller
// each interval (ReplicaStatus.Checkpoint, as an agent syncing checkpoints
// to the pool's storage reports an upload), and a new attempt resumes from
// the last one. Its mutex guards the nodes StartNode queues (the
// scale loop calls it); everything else is used from the simulation's
// goroutine only.
type runner struct {
	c   *controller.Controller
	cat *catalog.Catalog

	mu      sync.Mutex
	toStart []*model.Node

	jobs  map[string]*vjob  // by gpufleet job id
	nodes map[string]*vnode // registered and not yet gone, by node id
	order []*vnode          // the nodes, sorted by id
	// walked is set after the first sync; stateGen is the controller's
	// node-state number (Controller.MovedNodes) at the last sync's start.
	walked   bool
	stateGen uint64
	movedBuf []string

	busyGPUSeconds float64
	unstartedGPUs  float64 // asked by the jobs not yet started
	lostWork       time.Duration
	attempts       int
}

// vjob is what the runner knows of one job.
type vjob struct {
	runtime, interval time.Duration
	gpus              float64 // per replica
	replicas          int
	submitted         time.Time
	firstStart        time.Time // zero until an attempt started
	end               time.Time // when it succeeded; zero until then
	attemptID         string
	started           time.Time     // the latest attempt's start
	base              time.Duration // work saved when it started
	saved             time.Duration // work saved by the last checkpoint
}

// vnode is one simulated agent.
type vnode struct {
	id       string
	gen      uint64
	synced   bool
	moved    bool                 // its desired set moved since it last looked
	replicas map[string]*vreplica // by replica id
	// due is the earliest time one of its replicas has something to
	// report (an exit, a checkpoint); zero: nothing.
	due time.Time
}

type vreplica struct {
	job    string
	rank   int
	status agentapi.ReplicaStatus
	dirty  bool // changed since the last report
}

func newRunner(c *controller.Controller, cat *catalog.Catalog) *runner {
	return &runner{c: c, cat: cat, jobs: map[string]*vjob{}, nodes: map[string]*vnode{}}
}

// startNode is the controller's StartNode: the node's agent comes up at the
// next registration round.
func (r *runner) startNode(_ context.Context, n *model.Node) error {
	r.mu.Lock()
	r.toStart = append(r.toStart, n)
	r.mu.Unlock()
	return nil
}

// register registers every node started since the last call, as its agent
// would; it reports whether there were any.
func (r *runner) register(ctx context.Context) (bool, error) {
	r.mu.Lock()
	nodes := r.toStart
	r.toStart = nil
	r.mu.Unlock()
	for _, n := range nodes {
		count, name := controller.LaunchedGPUs(n)
		mem := model.Bytes(0)
		if a, ok := r.cat.Accelerator(name); ok {
			mem = a.Memory
		}
		reg := agentapi.Registration{NodeID: n.ID, Name: n.Name, Provider: n.Provider, GPUSource: "simulated",
			CPU: n.CPU, Memory: n.Memory, Labels: maps.Clone(n.Labels), Region: n.Region, Zone: n.Zone,
			InstanceType: n.InstanceType, CapacityType: n.CapacityType, AgentVersion: "simulate", Runtimes: []string{"process", "container"}}
		for i := range count {
			reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n.ID, i), Model: name, Memory: mem})
		}
		if _, err := r.c.Register(ctx, reg); err != nil {
			return false, fmt.Errorf("registering simulated node %s: %w", n.ID, err)
		}
		r.addNode(n.ID)
	}
	return len(nodes) > 0, nil
}

// registerOwned registers the agent of every owned machine (static
// pools), as `gpufleet agent` on each would when the run starts: the
// controller places each in the pool that declares it, at its price.
func (r *runner) registerOwned(ctx context.Context, machines []static.Machine) error {
	for _, m := range machines {
		mem := model.Bytes(0)
		if a, ok := r.cat.Accelerator(m.GPU); ok {
			mem = a.Memory
		}
		reg := agentapi.Registration{NodeID: m.Name, Name: m.Name, Provider: static.Name, GPUSource: "simulated",
			Region: static.Region, AgentVersion: "simulate", Runtimes: []string{"process", "container"},
			Labels: map[string]string{static.LabelAddress: m.Address}}
		for i := range m.GPUs {
			reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", m.Name, i), Model: m.GPU, Memory: mem})
		}
		if _, err := r.c.Register(ctx, reg); err != nil {
			return fmt.Errorf("registering owned machine %s: %w", m.Name, err)
		}
		r.addNode(m.Name)
	}
	return nil
}

func (r *runner) addNode(id string) {
	if r.nodes[id] != nil {
		return
	}
	vn := &vnode{id: id, replicas: map[string]*vreplica{}}
	r.nodes[id] = vn
	i, _ := slices.BinarySearchFunc(r.order, id, func(v *vnode, id string) int { return strings.Compare(v.id, id) })
	r.order = slices.Insert(r.order, i, vn)
}

// sync brings every agent to now: replicas on a node that is gone end
// with it; a node with something to report, or whose desired set moved,
// syncs and acts on the answer (starting and stopping replicas, then
// reporting what it started, as an agent does at once). Agents go in node
// id order; only those with something due, not yet synced, or listed by
// Controller.MovedNodes ask their NodeStatus (every agent does while a
// node's state changed), which is what a long-polling agent would be
// woken for: the other agents would learn nothing.
func (r *runner) sync(ctx context.Context, now time.Time) error {
	gen0 := r.takeMoved()
	all := !r.walked || gen0 != r.stateGen
	var gone []int
	for i, vn := range r.order {
		due := !vn.due.IsZero() && !vn.due.After(now)
		if !all && !due && !vn.moved && vn.synced {
			continue
		}
		vn.moved = false
		gen, state, ok := r.c.NodeStatus(vn.id)
		if !ok || (state != model.NodeReady && state != model.NodeDraining) {
			// The machine is gone (or lost): its replicas end now at the
			// latest.
			for _, rid := range slices.Sorted(maps.Keys(vn.replicas)) {
				if rp := vn.replicas[rid]; rp.status.Phase == agentapi.PhaseRunning {
					r.exit(rp, 137, "node gone", now)
				}
			}
			gone = append(gone, i)
			continue
		}
		report := false
		if due {
			r.advanceNode(vn, now)
			report = true
		}
		synced := false
		for range 4 { // an answer can start replicas, whose start is then reported
			if !report && vn.synced && gen == vn.gen {
				break
			}
			if err := r.syncNode(ctx, vn, now); err != nil {
				return err
			}
			synced = true
			report = r.dirty(vn)
			gen, _, _ = r.c.NodeStatus(vn.id)
		}
		// A sync can move other nodes (later ones are visited in this
		// walk, earlier ones at the next) or their states (then every
		// later one is visited, and every one at the next walk).
		if synced && r.takeMoved() != gen0 {
			all = true
		}
	}
	r.walked, r.stateGen = true, gen0
	for k, i := range gone {
		vn := r.order[i-k]
		delete(r.nodes, vn.id)
		r.order = slices.Delete(r.order, i-k, i-k+1)
	}
	return nil
}

// takeMoved flags the agents whose desired set moved since the last call
// and returns the controller's node-state number (Controller.MovedNodes).
func (r *runner) takeMoved() uint64 {
	ids, gen := r.c.MovedNodes(r.movedBuf[:0])
	for _, id := range ids {
		if vn := r.nodes[id]; vn != nil {
			vn.moved = true
		}
	}
	r.movedBuf = ids
	return gen
}

func (r *runner) dirty(vn *vnode) bool {
	for _, rp := range vn.replicas {
		if rp.dirty {
			return true
		}
	}
	return false
}

// syncNode sends vn's changed statuses and acts on the desired set.
func (r *runner) syncNode(ctx context.Context, vn *vnode, now time.Time) error {
	var sts []agentapi.ReplicaStatus
	for _, rid := range slices.Sorted(maps.Keys(vn.replicas)) {
		if rp := vn.replicas[rid]; rp.dirty {
			sts = append(sts, rp.status)
			rp.dirty = false
		}
	}
	resp, err := r.c.Sync(ctx, agentapi.SyncRequest{NodeID: vn.id, Generation: vn.gen, Statuses: sts})
	if err != nil {
		return fmt.Errorf("sync of simulated node %s: %w", vn.id, err)
	}
	vn.gen, vn.synced = resp.Generation, true
	listed := map[string]bool{}
	for _, spec := range resp.Replicas {
		listed[spec.ID] = true
		rp := vn.replicas[spec.ID]
		if rp == nil {
			if spec.Stop {
				continue
			}
			if err := r.start(spec, now); err != nil {
				return err
			}
			rp = &vreplica{job: spec.JobID, rank: spec.Rank, dirty: true,
				status: agentapi.ReplicaStatus{ID: spec.ID, Phase: agentapi.PhaseRunning, StartedAt: now}}
			vn.replicas[spec.ID] = rp
		}
		if spec.Stop && rp.status.Phase == agentapi.PhaseRunning {
			r.exit(rp, 143, agentapi.ReasonStopped, now)
		}
	}
	// Replicas the server no longer lists and whose end was reported are
	// forgotten, as an agent does.
	for id, rp := range vn.replicas {
		if !rp.dirty && rp.status.Phase == agentapi.PhaseExited && !listed[id] {
			delete(vn.replicas, id)
		}
	}
	r.plan(vn)
	return nil
}

// plan sets vn.due: its replicas' next exit or checkpoint.
func (r *runner) plan(vn *vnode) {
	vn.due = time.Time{}
	for _, rp := range vn.replicas {
		if rp.status.Phase != agentapi.PhaseRunning {
			continue
		}
		v := r.jobs[rp.job]
		t := v.started.Add(v.runtime - v.base)
		if v.interval > 0 && rp.rank == 0 {
			next := (v.saved/v.interval + 1) * v.interval
			if next < v.runtime {
				t = v.started.Add(next - v.base)
			}
		}
		if vn.due.IsZero() || t.Before(vn.due) {
			vn.due = t
		}
	}
}

// advanceNode brings vn's running replicas up to now.
func (r *runner) advanceNode(vn *vnode, now time.Time) {
	for _, rid := range slices.Sorted(maps.Keys(vn.replicas)) {
		r.advance(vn.replicas[rid], now)
	}
	r.plan(vn)
}

// advance brings a running replica up to now: checkpoints fall due (rank 0
// writes them) and the replica exits 0 once its job's work is done.
func (r *runner) advance(rp *vreplica, now time.Time) {
	if rp.status.Phase != agentapi.PhaseRunning {
		return
	}
	v := r.jobs[rp.job]
	end := v.started.Add(v.runtime - v.base)
	if v.interval > 0 && rp.rank == 0 {
		upto := now
		if end.Before(upto) {
			upto = end
		}
		done := v.base + upto.Sub(v.started)
		if saved := done / v.interval * v.interval; saved > v.saved && saved < v.runtime {
			// Uploaded to the job's checkpoint storage (the runner's
			// memory) and reported, as an agent that syncs checkpoints
			// does (ReplicaStatus.Checkpoint).
			v.saved = saved
			at := v.started.Add(saved - v.base)
			rp.status.Checkpoint = &at
			rp.dirty = true
		}
	}
	if !now.Before(end) {
		r.exit(rp, 0, "", end)
		if rp.rank == 0 {
			v.end = end
		}
	}
}

// exit ends replica rp at t.
func (r *runner) exit(rp *vreplica, code int, reason string, t time.Time) {
	ended := t
	rp.status = agentapi.ReplicaStatus{ID: rp.status.ID, Phase: agentapi.PhaseExited, ExitCode: &code, Reason: reason,
		StartedAt: rp.status.StartedAt, EndedAt: &ended}
	rp.dirty = true
	v := r.jobs[rp.job]
	r.busyGPUSeconds += v.gpus * t.Sub(rp.status.StartedAt).Seconds()
	if code != 0 && rp.rank == 0 {
		r.lostWork += v.base + t.Sub(v.started) - v.saved
	}
}

// start begins replica spec at now; the first replica of an attempt
// resumes the job from its checkpoint marker.
func (r *runner) start(spec agentapi.ReplicaSpec, now time.Time) error {
	v := r.jobs[spec.JobID]
	if v == nil {
		return fmt.Errorf("simulated node was given replica %s of job %s, which the trace did not submit", spec.ID, spec.JobID)
	}
	if v.attemptID == spec.AttemptID {
		return nil
	}
	if v.firstStart.IsZero() {
		v.firstStart = now
		r.unstartedGPUs -= v.gpus * float64(max(1, v.replicas))
	}
	// A new attempt restores the last checkpoint uploaded (none: from
	// the start).
	v.base = v.saved
	v.attemptID, v.started = spec.AttemptID, now
	r.attempts++
	return nil
}

// nextDue is the earliest time an agent has something to report; false
// when none has.
func (r *runner) nextDue() (time.Time, bool) {
	var next time.Time
	for _, vn := range r.order {
		if !vn.due.IsZero() && (next.IsZero() || vn.due.Before(next)) {
			next = vn.due
		}
	}
	return next, !next.IsZero()
}
