// Package simulate replays a job trace through the real controller and
// scheduler on a fake clock (`gpufleet simulate`): the fleet's sim pools
// scale on simulated clouds built from the embedded catalog (spot
// interruptions at the catalog's rates), virtual agents register the nodes
// and run each job for its trace runtime, and the clock jumps from event to
// event. Nothing of the policy is re-implemented here: queueing,
// placement, scaling, preemption, retries and the cost ledger are the
// controller's. A run is deterministic for a seed.
package simulate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/launch"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/static"
	"github.com/gpufleet/gpufleet/internal/trace"
)

// Start is the simulated clock's start: the trace's offset 0.
var Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Config is one simulated run.
type Config struct {
	// Fleet is the declared fleet; every NodePool must use provider sim.
	Fleet *manifest.Set
	Trace *trace.Trace
	Seed  int64
	// Tick, when set, bounds a step of the clock while jobs wait or nodes
	// idle. 0 (the default) jumps straight from event to event: the next
	// submission, replica end or checkpoint, cloud event, or controller
	// timer (Controller.NextWake: idle and launch timeouts, back-offs).
	Tick time.Duration
	// Horizon ends the run this long after the last submission even if
	// jobs remain (they count as unfinished); 0 means 30 days.
	Horizon time.Duration
	// Scenario, when set, overrides the simulated clouds' defaults.
	Scenario *sim.Scenario
	// Catalog is the offers' source; nil means the embedded catalog.
	Catalog *catalog.Catalog
}

// Run simulates cfg to the end of its trace (every job ended) or its
// horizon.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Horizon <= 0 {
		cfg.Horizon = 30 * 24 * time.Hour
	}
	if cfg.Fleet == nil || len(cfg.Fleet.NodePools) == 0 {
		return nil, fmt.Errorf("the fleet declares no NodePool: nothing to run the trace on")
	}
	for i, p := range cfg.Fleet.NodePools {
		if p.Spec.Provider != model.ProviderSim && p.Spec.Provider != model.ProviderStatic {
			return nil, fmt.Errorf("nodePools[%d] (%s): spec.provider: %q cannot be simulated; only provider %q (bought) and %q (owned machines) pools can", i, p.Metadata.Name, p.Spec.Provider, model.ProviderSim, model.ProviderStatic)
		}
	}
	cat := cfg.Catalog
	if cat == nil {
		var err error
		if cat, err = catalog.Load(); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "gpufleet-simulate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	logs, err := logstore.New(tmp + "/logs")
	if err != nil {
		return nil, err
	}

	clk := clock.NewFake(Start)
	sp, err := sim.New(sim.Config{Catalog: cat, Keep: buyable(cfg.Fleet), Clock: clk, Seed: cfg.Seed, Scenario: cfg.Scenario, Providers: clouds(cfg.Fleet)})
	if err != nil {
		return nil, err
	}
	drivers, err := registry.New(registry.Driver{Name: model.ProviderSim, New: sp.ForPool, Price: sim.PoolPrice},
		registry.Driver{Name: static.Name, Check: static.CheckPool, Price: static.PoolPrice})
	if err != nil {
		return nil, err
	}
	// Owned machines (static pools) follow the applied fleet, as in `up`;
	// their virtual agents register at the start (runner.registerOwned).
	owned := static.NewPools(nil, Start)
	ms := newMemStore()
	ids := map[string]int{}
	var r *runner
	var fatal error
	c, err := controller.New(ctx, controller.Config{Store: ms, Logs: logs, Clock: clk,
		// Checkpoints go through the agent protocol
		// (ReplicaStatus.Checkpoint), not markers on disk; the cost
		// loop is driven by the run (meter).
		PassGap: -1, Cost: controller.CostConfig{MeterInterval: -1}, Seed: cfg.Seed, HeartbeatTimeout: 365 * 24 * time.Hour,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Fatal: func(err error) { fatal = err },
		// Called under the controller's mutex: ids count per prefix, so a
		// run's ids, and so its order of events, repeat for a seed.
		NewID:        func(prefix string) string { ids[prefix]++; return fmt.Sprintf("%s%07d", prefix, ids[prefix]) },
		Offers:       func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o },
		PoolsChanged: owned.SetPools, Adopters: map[string]provider.Adopter{static.Name: owned},
		Scale: controller.ScaleConfig{Providers: []provider.Provider{sp}, Drivers: drivers, LaunchTimeout: 15 * time.Minute,
			StartNode: func(ctx context.Context, n *model.Node) error { return r.startNode(ctx, n) },
			Launches:  launch.Options{PerProvider: 1, PerRegion: 1}}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r = newRunner(c, cat)
	if _, err := c.ApplyFleet(ctx, cfg.Fleet, controller.ApplyOptions{Author: "simulate"}); err != nil {
		return nil, fmt.Errorf("applying the fleet: %w", err)
	}
	if err := r.registerOwned(ctx, ownedMachines(cfg.Fleet)); err != nil {
		return nil, err
	}
	declared := map[string]bool{}
	for _, q := range cfg.Fleet.Queues {
		declared["queue/"+q.Metadata.Name] = true
	}
	for _, p := range cfg.Fleet.Projects {
		declared["project/"+p.Metadata.Name] = true
	}

	jobs := cfg.Trace.Jobs
	res := &Result{Trace: cfg.Trace.Name, Seed: cfg.Seed, Jobs: len(jobs)}
	if len(jobs) == 0 {
		return res, nil
	}
	origin := jobs[0].Submit // the run starts at the first submission
	byID := map[string]trace.Job{}
	var order []string
	next := 0
	end := Start.Add(jobs[len(jobs)-1].Submit - origin + cfg.Horizon)
	wall := time.Now()
	// wakes offers the times the world changes by itself: an agent's
	// replica ends or checkpoints, a cloud event, a controller timer.
	wakes := func(consider func(time.Time)) {
		if t, ok := r.nextDue(); ok {
			consider(t)
		}
		if t, ok := sp.NextDue(); ok {
			consider(t)
		}
		if t, ok := c.NextWake(); ok {
			consider(t)
		}
	}
	// meter runs the cost pass as `up` does, every minute and on each
	// hour boundary, but only at steps: without budgets, whose holds are
	// the only thing it changes, once an hour is enough (the meter
	// splits its entries at hours, so the ledger's hourly sums are the
	// same).
	every := time.Hour
	if len(cfg.Fleet.Budgets) > 0 {
		every = time.Minute
	}
	queue := map[time.Time]queueSample{}
	var lastHour time.Time
	var metered time.Time
	meter := func(now time.Time) error {
		if !metered.IsZero() && now.Sub(metered) < every && now.Truncate(time.Hour).Equal(metered.Truncate(time.Hour)) {
			return nil
		}
		metered = now
		return c.CostPass(ctx)
	}
	for {
		if fatal != nil {
			return nil, fmt.Errorf("the controller stopped: %w", fatal)
		}
		now := clk.Now()
		for ; next < len(jobs) && !Start.Add(jobs[next].Submit-origin).After(now); next++ {
			id, err := submit(ctx, c, jobs[next], declared)
			if err != nil {
				return nil, fmt.Errorf("submitting trace job %s: %w", jobs[next].ID, err)
			}
			tj := jobs[next]
			r.jobs[id] = &vjob{runtime: tj.Runtime, interval: tj.CheckpointInterval, gpus: tj.GPUs, replicas: tj.Replicas, submitted: now}
			r.unstartedGPUs += tj.GPUs * float64(max(1, tj.Replicas))
			byID[id] = tj
			order = append(order, id)
		}
		if err := r.sync(ctx, now); err != nil {
			return nil, err
		}
		if err := c.Step(ctx); err != nil {
			return nil, err
		}
		started, err := r.register(ctx)
		if err != nil {
			return nil, err
		}
		if started {
			if err := c.Step(ctx); err != nil {
				return nil, err
			}
		}
		if err := r.sync(ctx, now); err != nil {
			return nil, err
		}
		if err := meter(now); err != nil {
			return nil, err
		}
		res.Steps++
		counts := c.JobCounts()
		waiting := counts[model.JobQueued] + counts[model.JobAdmitted] + counts[model.JobProvisioning]
		if h := now.Truncate(time.Hour); !h.Equal(lastHour) {
			queue[h], lastHour = queueSample{queued: waiting, running: counts[model.JobRunning], gpus: r.unstartedGPUs}, h
		}
		active := waiting + counts[model.JobRunning]
		if next == len(jobs) && active == 0 {
			break
		}
		// The next step: the next submission, job end or cloud event;
		// no later than a tick while anything waits or idles.
		var at time.Time
		consider := func(t time.Time) {
			if !t.IsZero() && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		if next < len(jobs) {
			consider(Start.Add(jobs[next].Submit - origin))
		}
		wakes(consider)
		if cfg.Tick > 0 && (waiting > 0 || idleNodes(c)) {
			consider(now.Add(cfg.Tick))
		}
		if at.IsZero() || !at.After(now) {
			at = now.Add(time.Second)
		}
		if at.After(end) {
			break
		}
		clk.Set(at)
	}
	res.Wall = time.Since(wall)
	// Let idle nodes go, so the bill covers what the fleet would keep: for
	// as long as the longest idle timeout (and a margin for boots and scale
	// cycles) after the last job; what is still live then is held by the
	// pools' min, and billed to the end. Without the bound a pool's min
	// beside spot capacity (whose interruptions keep waking the loop) never
	// let it end.
	drainEnd := clk.Now().Add(longestIdle(cfg.Fleet) + drainMargin)
	for range 1000 {
		if !anyLive(c) {
			break
		}
		var at time.Time
		wakes(func(t time.Time) {
			if !t.IsZero() && t.After(clk.Now()) && (at.IsZero() || t.Before(at)) {
				at = t
			}
		})
		if at.IsZero() || at.After(drainEnd) {
			break
		}
		clk.Set(at)
		if err := r.sync(ctx, at); err != nil {
			return nil, err
		}
		if err := c.Step(ctx); err != nil {
			return nil, err
		}
		if err := meter(at); err != nil {
			return nil, err
		}
	}
	// The meter counts whole seconds up to a pass's time, truncated: a
	// last pass a second later reaches every stop's second, as the
	// clouds' bills do.
	clk.Advance(time.Second)
	if err := c.CostPass(ctx); err != nil {
		return nil, err
	}
	ps := c.PassStats()
	res.Passes, res.PassJobs = int(ps.Scheduled), int(ps.Jobs)
	ss := c.ScaleStats()
	res.Decides, res.DecidesSkipped = int(ss.Decided), int(ss.Skipped)
	return finish(ctx, res, c, sp, ms, r, order, clk.Now(), queue)
}

// submit submits trace job tj as a gpufleet job: the trace's queue and
// project where the fleet declares them (else the defaults, the trace's
// names kept as tags), spot allowed, its runtime as the estimate.
func submit(ctx context.Context, c *controller.Controller, tj trace.Job, declared map[string]bool) (string, error) {
	spec := model.JobSpec{Replicas: tj.Replicas, Spot: model.SpotAllowed}
	spec.Resources.GPUs = tj.GPUs
	spec.Resources.GPU.Models = slices.Clone(tj.GPUModels)
	spec.Run.Command = []string{"simulated"}
	spec.Estimate.Runtime = model.Duration(tj.Runtime)
	spec.Checkpoint.Interval = model.Duration(tj.CheckpointInterval)
	spec.Retries.Preemptions = 1000
	tags := map[string]string{"trace.job": tj.ID}
	for k, v := range tj.Tags {
		tags[k] = v
	}
	project := "default"
	if tj.Project != "" {
		if declared["project/"+tj.Project] {
			project = tj.Project
		} else {
			tags["trace.project"] = tj.Project
		}
	}
	if tj.Queue != "" {
		if declared["queue/"+tj.Queue] {
			spec.Queue = tj.Queue
		} else {
			tags["trace.queue"] = tj.Queue
		}
	}
	spec.Default()
	j, _, err := c.Submit(ctx, controller.Submission{Project: project, User: "trace", Tags: tags, Spec: spec})
	if err != nil {
		return "", err
	}
	return j.ID, nil
}

func idleNodes(c *controller.Controller) bool {
	for _, n := range c.Nodes() {
		if n.State == model.NodeReady && len(n.GPUHolders) == 0 {
			return true
		}
	}
	return false
}

// drainMargin is how long past the longest idle timeout the drain after
// the last job follows the fleet: a node launched at the end boots, idles
// and is given back within it.
const drainMargin = time.Hour

// longestIdle is the longest idle timeout among set's pools (the
// autoscaler's default where a pool sets none).
func longestIdle(set *manifest.Set) time.Duration {
	d := autoscaler.DefaultIdleTimeout
	for _, p := range set.NodePools {
		d = max(d, p.Spec.IdleTimeout.D())
	}
	return d
}

func anyLive(c *controller.Controller) bool {
	for _, n := range c.Nodes() {
		if n.State != model.NodeTerminated && n.State != model.NodeLost {
			return true
		}
	}
	return false
}

// buyable keeps the offers some pool of set admits (autoscaler.Admits)
// from one of its clouds: no other can ever be launched, so leaving them
// out changes no decision, and every scheduling pass and scale cycle then
// ranks a few dozen offers rather than the whole catalog.
func buyable(set *manifest.Set) func(model.Offer) bool {
	return func(o model.Offer) bool {
		for _, p := range set.NodePools {
			if p.Spec.Provider == model.ProviderSim && (p.Spec.Sim == nil || len(p.Spec.Sim.Clouds) == 0 || slices.Contains(p.Spec.Sim.Clouds, o.Provider)) && autoscaler.Admits(&model.NodePool{Name: p.Metadata.Name, Spec: p.Spec}, o) {
				return true
			}
		}
		return false
	}
}

// ownedMachines lists the machines of set's static pools.
func ownedMachines(set *manifest.Set) []static.Machine {
	var pools []*model.NodePool
	for _, p := range set.NodePools {
		pools = append(pools, &model.NodePool{Name: p.Metadata.Name, Spec: p.Spec})
	}
	return static.Machines(pools)
}

// clouds is every cloud the fleet's sim pools name; nil (all) when one
// names none.
func clouds(set *manifest.Set) []string {
	var out []string
	for _, p := range set.NodePools {
		if p.Spec.Provider != model.ProviderSim {
			continue
		}
		if p.Spec.Sim == nil || len(p.Spec.Sim.Clouds) == 0 {
			return nil
		}
		for _, c := range p.Spec.Sim.Clouds {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}
