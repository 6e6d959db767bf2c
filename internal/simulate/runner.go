package simulate

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
)

// runner plays the agent of every simulated node through the agent
// protocol: a node whose instance runs registers (Controller.Register) with
// the offer's GPUs, then syncs its replicas' statuses (Controller.Sync). A
// replica "runs" until its job's trace runtime is done, from where its
// attempt resumed; a job with a checkpoint interval writes its checkpoint
// marker and tells the controller (Controller.Checkpoint) each interval,
// and a new attempt resumes from what the marker says. Its mutex guards
// the nodes StartNode queues (the scale loop calls it); everything else is
// used from the simulation's goroutine only.
type runner struct {
	c   *controller.Controller
	cat *catalog.Catalog

	mu      sync.Mutex
	toStart []*model.Node

	jobs     map[string]*vjob     // by gpufleet job id
	replicas map[string]*vreplica // by replica id

	busyGPUSeconds float64
	lostWork       time.Duration
	attempts       int
}

// vjob is what the runner knows of one job.
type vjob struct {
	runtime, interval time.Duration
	gpus              float64 // per replica
	submitted         time.Time
	firstStart        time.Time // zero until an attempt started
	attemptID         string
	started           time.Time     // the latest attempt's start
	base              time.Duration // work saved when it started
	saved             time.Duration // work saved by the last checkpoint
	dir               string
}

type vreplica struct {
	node   string
	job    string
	rank   int
	status agentapi.ReplicaStatus
	sent   bool // its exit was reported
}

func newRunner(c *controller.Controller, cat *catalog.Catalog) *runner {
	return &runner{c: c, cat: cat, jobs: map[string]*vjob{}, replicas: map[string]*vreplica{}}
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
	}
	return len(nodes) > 0, nil
}

// sync syncs every ready or draining node at now: it reports its replicas'
// statuses (exits at their exact end times) and acts on the desired set.
func (r *runner) sync(ctx context.Context, now time.Time) error {
	byNode := map[string][]*vreplica{}
	for _, id := range slices.Sorted(maps.Keys(r.replicas)) {
		rp := r.replicas[id]
		byNode[rp.node] = append(byNode[rp.node], rp)
	}
	live := map[string]bool{}
	for _, n := range r.c.Nodes() {
		if n.State != model.NodeReady && n.State != model.NodeDraining {
			continue
		}
		live[n.ID] = true
		var sts []agentapi.ReplicaStatus
		for _, rp := range byNode[n.ID] {
			r.advance(ctx, rp, now)
			sts = append(sts, rp.status)
			rp.sent = rp.status.Phase == agentapi.PhaseExited
		}
		resp, err := r.c.Sync(ctx, agentapi.SyncRequest{NodeID: n.ID, Statuses: sts})
		if err != nil {
			return fmt.Errorf("sync of simulated node %s: %w", n.ID, err)
		}
		listed := map[string]bool{}
		for _, spec := range resp.Replicas {
			listed[spec.ID] = true
			rp := r.replicas[spec.ID]
			if rp == nil {
				if spec.Stop {
					continue
				}
				if err := r.start(spec, now); err != nil {
					return err
				}
				rp = &vreplica{node: n.ID, job: spec.JobID, rank: spec.Rank, status: agentapi.ReplicaStatus{ID: spec.ID, Phase: agentapi.PhaseRunning, StartedAt: now}}
				r.replicas[spec.ID] = rp
			}
			if spec.Stop && rp.status.Phase == agentapi.PhaseRunning {
				r.exit(rp, 143, agentapi.ReasonStopped, now)
			}
		}
		// Replicas the server no longer lists and whose end was reported
		// are forgotten, as an agent does.
		for _, rp := range byNode[n.ID] {
			if rp.sent && !listed[rp.status.ID] {
				delete(r.replicas, rp.status.ID)
			}
		}
	}
	// Replicas on nodes that are gone are gone too; their GPU time ends
	// now (at the latest).
	for id, rp := range r.replicas {
		if !live[rp.node] {
			if rp.status.Phase == agentapi.PhaseRunning {
				r.exit(rp, 137, "node gone", now)
			}
			delete(r.replicas, id)
		}
	}
	return nil
}

// advance brings a running replica up to now: checkpoints fall due (rank 0
// writes them) and the replica exits 0 once its job's work is done.
func (r *runner) advance(ctx context.Context, rp *vreplica, now time.Time) {
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
			v.saved = saved
			if err := os.WriteFile(filepath.Join(v.dir, "LATEST"), []byte(fmt.Sprintf("work=%d\n", int64(saved))), 0o600); err == nil {
				_, _ = r.c.Checkpoint(ctx, rp.job) // a failed report costs only the event
			}
		}
	}
	if !now.Before(end) {
		r.exit(rp, 0, "", end)
	}
}

// exit ends replica rp at t.
func (r *runner) exit(rp *vreplica, code int, reason string, t time.Time) {
	ended := t
	rp.status = agentapi.ReplicaStatus{ID: rp.status.ID, Phase: agentapi.PhaseExited, ExitCode: &code, Reason: reason,
		StartedAt: rp.status.StartedAt, EndedAt: &ended}
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
	}
	v.dir = spec.Env["GPUFLEET_CHECKPOINT_DIR"]
	v.base = 0
	if v.interval > 0 && v.dir != "" {
		if data, err := os.ReadFile(filepath.Join(v.dir, "LATEST")); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(string(data), "work=")), 10, 64)
			if err != nil {
				return fmt.Errorf("checkpoint marker of job %s: %q: %w", spec.JobID, data, err)
			}
			v.base = time.Duration(n)
		}
	}
	v.saved = v.base
	v.attemptID, v.started = spec.AttemptID, now
	r.attempts++
	return nil
}

// nextEnd is the earliest time a running replica finishes; false when none
// runs.
func (r *runner) nextEnd() (time.Time, bool) {
	var next time.Time
	for _, rp := range r.replicas {
		if rp.status.Phase != agentapi.PhaseRunning {
			continue
		}
		v := r.jobs[rp.job]
		if end := v.started.Add(v.runtime - v.base); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	return next, !next.IsZero()
}
