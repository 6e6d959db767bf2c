package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/agentapi/httpcp"
	"github.com/gpufleet/gpufleet/internal/model"
)

// tracker sees every replica start and end across all virtual agents: when
// each job was first placed, and whether any job ran twice.
type tracker struct {
	mu         sync.Mutex
	placedAt   map[string]time.Time      // job id → when an agent first saw it
	starts     map[string]int            // replica id → times started
	running    map[string]map[string]int // job id → attempt id → replicas running
	doubleJobs map[string]bool           // jobs seen running two attempts at once
	twice      int                       // replica ids started more than once
	ended      int                       // replicas reported ended
	want       int                       // jobs to place
	allPlaced  chan struct{}             // closed once want jobs were placed
	lastPlaced time.Time
	succeeded  int           // replicas that exited 0 and whose end the server recorded
	allDone    chan struct{} // closed once want replicas succeeded
}

func newTracker(want int) *tracker {
	return &tracker{
		placedAt: map[string]time.Time{}, starts: map[string]int{}, running: map[string]map[string]int{},
		doubleJobs: map[string]bool{}, want: want, allPlaced: make(chan struct{}), allDone: make(chan struct{}),
	}
}

// started records that an agent starts spec now.
func (t *tracker) started(spec agentapi.ReplicaSpec, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.placedAt[spec.JobID]; !ok {
		t.placedAt[spec.JobID] = now
		t.lastPlaced = now
		if len(t.placedAt) == t.want {
			close(t.allPlaced)
		}
	}
	t.starts[spec.ID]++
	if t.starts[spec.ID] == 2 {
		t.twice++
	}
	att := t.running[spec.JobID]
	if att == nil {
		att = map[string]int{}
		t.running[spec.JobID] = att
	}
	for id, n := range att {
		if id != spec.AttemptID && n > 0 {
			t.doubleJobs[spec.JobID] = true
		}
	}
	att[spec.AttemptID]++
}

// stopped records that a replica of spec no longer runs.
func (t *tracker) stopped(spec agentapi.ReplicaSpec) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended++
	if att := t.running[spec.JobID]; att != nil {
		if att[spec.AttemptID]--; att[spec.AttemptID] <= 0 {
			delete(att, spec.AttemptID)
		}
		if len(att) == 0 {
			delete(t.running, spec.JobID)
		}
	}
}

// placedBy is when the last job was placed, once all were, but not before
// notBefore (a job can reach its agent before its submit answer returns).
func (t *tracker) placedBy(notBefore time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastPlaced.Before(notBefore) {
		return notBefore
	}
	return t.lastPlaced
}

// recorded notes that the server recorded the end of a replica that
// exited 0: it no longer lists it after the agent reported that end.
func (t *tracker) recorded() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.succeeded++; t.succeeded == t.want {
		close(t.allDone)
	}
}

// vnode is one virtual agent: the real protocol, no processes.
type vnode struct {
	cp   *httpcp.Client
	reg  agentapi.Registration
	cfg  *Config
	t    *tracker
	logs []byte // what every replica "prints"

	nodeID    string
	heartbeat time.Duration
	gen       uint64
	reps      map[string]*vrep
	delivered map[string]agentapi.Phase
	changed   chan struct{}
	sampled   time.Time // last telemetry sample taken
}

// vrep is a replica the virtual agent runs.
type vrep struct {
	spec    agentapi.ReplicaSpec
	status  agentapi.ReplicaStatus
	endAt   time.Time // when it exits by itself
	stopNow bool      // the server asked for a stop
}

// newVNode returns virtual node i with its token; hc is shared by all.
func newVNode(i int, base, token string, hc *http.Client, cfg *Config, t *tracker) *vnode {
	name := nodeName(i)
	gpus := make([]model.GPU, cfg.GPUsPerNode)
	for g := range gpus {
		gpus[g] = model.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "H100", Memory: 80 * model.GiB, NVLinkGroup: 0}
	}
	return &vnode{
		cp:  httpcp.New(base, token, httpcp.Options{HTTPClient: hc}),
		cfg: cfg, t: t,
		reg: agentapi.Registration{
			NodeID: name, Name: name, Provider: "static", GPUs: gpus, GPUSource: "fake",
			CPU: cfg.NodeCPU, Memory: model.Bytes(cfg.NodeMemoryGi) * model.GiB,
			// Every real agent registers its own address: no two nodes share it.
			Labels:       map[string]string{"gpufleet.dev/address": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)},
			Region:       "loopback",
			Zone:         fmt.Sprintf("loopback-%d", i%4),
			CapacityType: model.Owned, AgentVersion: "loadtest", Runtimes: []string{"process"},
		},
		logs:    []byte("loading checkpoint\nstep 1 loss 2.31\nstep 2 loss 2.07\nstep 3 loss 1.94\nsaving checkpoint\ndone\n"),
		reps:    map[string]*vrep{},
		changed: make(chan struct{}, 1),
	}
}

func nodeName(i int) string { return fmt.Sprintf("vnode-%05d", i) }

// register announces the node, retrying until it succeeds or ctx ends.
func (n *vnode) register(ctx context.Context) error {
	for {
		resp, err := n.cp.Register(ctx, n.reg)
		if err == nil {
			n.nodeID, n.heartbeat, n.gen, n.delivered = resp.NodeID, resp.HeartbeatInterval.D(), 0, nil
			n.sampled = time.Now()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond): // back-off between retries
		}
	}
}

// run syncs until ctx ends; the node must be registered.
func (n *vnode) run(ctx context.Context) {
	for ctx.Err() == nil {
		select { // news before this point is in the request below
		case <-n.changed:
		default:
		}
		n.finishDue(ctx, time.Now())
		req, endedIDs := n.request(time.Now())
		var timer *time.Timer
		if next, ok := n.nextExit(); ok {
			timer = time.AfterFunc(time.Until(next), func() {
				select {
				case n.changed <- struct{}{}:
				default:
				}
			})
		}
		resp, woken, err := agentapi.SyncUnlessChanged(ctx, n.cp, req, n.changed)
		if timer != nil {
			timer.Stop()
		}
		switch {
		case err == nil:
			n.delivered = make(map[string]agentapi.Phase, len(req.Statuses))
			for _, s := range req.Statuses {
				n.delivered[s.ID] = s.Phase
			}
			if req.Telemetry != nil && len(req.Telemetry.Samples) > 0 {
				n.sampled = req.Telemetry.Samples[len(req.Telemetry.Samples)-1].Time
			}
			n.apply(resp, endedIDs, time.Now())
		case ctx.Err() != nil:
			return
		case woken:
		case errors.Is(err, agentapi.ErrUnknownNode):
			if n.register(ctx) != nil {
				return
			}
		default:
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // back-off, as a real agent's
			}
		}
	}
	for _, r := range n.reps {
		if r.status.Phase == agentapi.PhaseRunning {
			n.t.stopped(r.spec)
		}
	}
}

// finishDue ends the replicas whose time is up or that the server stopped:
// their output is shipped first, then the end is reported, as a real agent
// does.
func (n *vnode) finishDue(ctx context.Context, now time.Time) {
	for _, r := range n.reps {
		if r.status.Phase != agentapi.PhaseRunning || (!r.stopNow && now.Before(r.endAt)) {
			continue
		}
		_, err := n.cp.AppendLog(ctx, agentapi.LogChunk{NodeID: n.nodeID, ReplicaID: r.spec.ID, Data: n.logs, EOF: true})
		var refused *httpcp.Error
		if err != nil && !(errors.As(err, &refused) && refused.Status < 500) {
			continue // the next round ships it again
		}
		end := time.Now()
		code := 0
		r.status.Phase, r.status.EndedAt, r.status.ExitCode = agentapi.PhaseExited, &end, &code
		if r.stopNow {
			code = 143
			r.status.Signal, r.status.Reason = "SIGTERM", agentapi.ReasonStopped
		}
		n.t.stopped(r.spec)
	}
}

// request reports every replica; it waits on the server only when the
// server already has all of it.
func (n *vnode) request(now time.Time) (agentapi.SyncRequest, map[string]bool) {
	req := agentapi.SyncRequest{NodeID: n.nodeID, Generation: n.gen, Wait: model.Duration(n.heartbeat)}
	ended := map[string]bool{}
	for id, r := range n.reps {
		req.Statuses = append(req.Statuses, r.status)
		if r.status.Phase != agentapi.PhaseRunning {
			ended[id] = true
		}
		if n.delivered[id] != r.status.Phase {
			req.Wait = 0
		}
	}
	req.Telemetry = n.telemetry(now)
	return req, ended
}

// telemetry returns the GPU samples due since the last delivered one.
func (n *vnode) telemetry(now time.Time) *agentapi.Telemetry {
	t := &agentapi.Telemetry{Source: "simulated"}
	due := int(now.Sub(n.sampled) / n.cfg.TelemetryInterval)
	due = min(due, agentapi.MaxTelemetrySamples)
	if due <= 0 {
		return t
	}
	busy := map[int]bool{}
	for _, r := range n.reps {
		if r.status.Phase == agentapi.PhaseRunning {
			for _, g := range r.spec.GPUs {
				busy[g] = true
			}
		}
	}
	for s := due - 1; s >= 0; s-- {
		at := now.Add(-time.Duration(s) * n.cfg.TelemetryInterval)
		sample := agentapi.TelemetrySample{Time: at, GPUs: make([]agentapi.GPUTelemetry, len(n.reg.GPUs))}
		for i, g := range n.reg.GPUs {
			sm, util := 0.0, 0.0
			if busy[g.Index] {
				sm, util = 0.62, 97
			}
			sample.GPUs[i] = agentapi.GPUTelemetry{Index: g.Index, UUID: g.UUID, Values: map[string]float64{
				"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_PROF_SM_ACTIVE": sm, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": sm / 2,
				"DCGM_FI_PROF_DRAM_ACTIVE": sm / 3, "DCGM_FI_DEV_FB_USED": 61440 * sm, "DCGM_FI_DEV_FB_TOTAL": 81559,
				"DCGM_FI_DEV_POWER_USAGE": 90 + 500*sm, "DCGM_FI_DEV_GPU_TEMP": 35 + 30*sm,
			}}
		}
		t.Samples = append(t.Samples, sample)
	}
	return t
}

// nextExit is when the next running replica exits by itself.
func (n *vnode) nextExit() (time.Time, bool) {
	var next time.Time
	for _, r := range n.reps {
		if r.status.Phase == agentapi.PhaseRunning && (next.IsZero() || r.endAt.Before(next)) {
			next = r.endAt
		}
	}
	return next, !next.IsZero()
}

// apply starts what the desired set adds, stops what it marks or drops,
// and forgets ended replicas the server no longer lists after their end
// was reported.
func (n *vnode) apply(resp agentapi.SyncResponse, reportedEnded map[string]bool, now time.Time) {
	n.gen = resp.Generation
	desired := make(map[string]bool, len(resp.Replicas))
	for _, spec := range resp.Replicas {
		desired[spec.ID] = true
		r := n.reps[spec.ID]
		switch {
		case r == nil && spec.Stop:
			// Never started: reported as stopped, like a real agent.
			code := 143
			n.reps[spec.ID] = &vrep{spec: spec, status: agentapi.ReplicaStatus{
				ID: spec.ID, Phase: agentapi.PhaseExited, ExitCode: &code, Signal: "SIGTERM",
				Reason: agentapi.ReasonStopped, StartedAt: now, EndedAt: &now,
			}}
		case r == nil:
			n.t.started(spec, now)
			n.reps[spec.ID] = &vrep{spec: spec, endAt: now.Add(n.cfg.JobDuration),
				status: agentapi.ReplicaStatus{ID: spec.ID, Phase: agentapi.PhaseRunning, StartedAt: now}}
		case spec.Stop:
			r.stopNow = true
		}
	}
	for id, r := range n.reps {
		switch {
		case desired[id]:
		case reportedEnded[id]:
			delete(n.reps, id)
			if c := r.status.ExitCode; c != nil && *c == 0 && r.status.Reason == "" {
				n.t.recorded()
			}
		case r.status.Phase == agentapi.PhaseRunning:
			r.stopNow = true
		}
	}
}
