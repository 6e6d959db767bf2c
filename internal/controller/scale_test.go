package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
)

// TestScaleSpotLifecycle drives one 8-GPU spot job through the scale loop
// by hand (no Run, so every step is explicit): launch → ready → bound →
// notice → drain → preempted → requeued, and a leaked instance terminated.
func TestScaleSpotLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	sp, err := sim.New(sim.Config{Clock: clk, Seed: 7, Providers: []string{"aws"}})
	if err != nil {
		t.Fatal(err)
	}
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, Config{Store: newMemStore(), Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		Offers: func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o },
		Scale:  ScaleConfig{Providers: []provider.Provider{sp}, LaunchTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.mu.Lock()
	c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Max: 4,
		CapacityTypes: []model.CapacityType{model.OnDemand, model.Spot}, IdleTimeout: model.Duration(10 * time.Minute)}}}
	c.mu.Unlock()

	spec := model.JobSpec{Replicas: 1, Spot: model.SpotAllowed}
	spec.Resources.GPUs = 8
	spec.Run.Command = []string{"train"}
	spec.Estimate.Runtime = model.Duration(time.Hour)
	spec.Checkpoint.Interval = model.Duration(10 * time.Minute)
	spec.Default()
	j, _, err := c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}

	// 1. The pass finds no node; the scale loop launches one.
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	c.scale(ctx)
	nodes := c.Nodes()
	if len(nodes) != 1 || nodes[0].State != model.NodeLaunching || nodes[0].Labels[model.LabelInstance] == "" {
		t.Fatalf("after launch: nodes %+v", nodes)
	}
	// A second cycle while it boots launches nothing more.
	c.scale(ctx)
	if n := len(c.Nodes()); n != 1 {
		t.Fatalf("a booting node's job got another launch: %d nodes", n)
	}
	// 2. Boot, ready, bound.
	clk.Advance(10 * time.Minute)
	c.scale(ctx)
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	nodeID := c.Nodes()[0].ID
	resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: nodeID})
	if err != nil || len(resp.Replicas) != 1 {
		t.Fatalf("desired set %+v, %v", resp, err)
	}
	rid := resp.Replicas[0].ID
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: nodeID, Statuses: []agentapi.ReplicaStatus{running(rid)}}); err != nil {
		t.Fatal(err)
	}
	// 3. A spot notice drains the node and stops the attempt preempted.
	if _, err := sp.Interrupt(ctx, c.Nodes()[0].Labels[model.LabelInstance]); err != nil {
		t.Fatal(err)
	}
	c.scale(ctx)
	if st := c.Nodes()[0].State; st != model.NodeDraining {
		t.Fatalf("node %s after notice, want draining", st)
	}
	resp, _ = c.Sync(ctx, agentapi.SyncRequest{NodeID: nodeID})
	if !resp.Drain || len(resp.Replicas) != 1 || !resp.Replicas[0].Stop {
		t.Fatalf("desired after notice: %+v", resp)
	}
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: nodeID, Statuses: []agentapi.ReplicaStatus{exited(rid, 143, "")}}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Job(j.ID)
	if got.State != model.JobQueued || got.Preemptions != 1 || got.Attempts != 1 {
		t.Fatalf("job after preemption: state %s preemptions %d attempts %d", got.State, got.Preemptions, got.Attempts)
	}
	// 4. The instance stops; the node is terminated. A leaked instance
	// is terminated too.
	leak, err := sp.Launch(ctx, provider.LaunchRequest{Offer: c.Nodes()[0].offerFor(t, sp), Token: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Minute)
	c.scale(ctx)
	list, _ := sp.List(ctx)
	for _, in := range list {
		if in.ID == leak.ID {
			t.Errorf("leaked instance %s still listed", leak.ID)
		}
	}
	kinds := map[model.EventKind]int{}
	for _, e := range c.Events(EventFilter{Limit: 1000}) {
		kinds[e.Kind]++
	}
	for _, k := range []model.EventKind{model.EventLaunch, model.EventNodeReady, model.EventNotice, model.EventDrain, model.EventPreempted, model.EventRequeue, model.EventTerminate, model.EventLeak} {
		if kinds[k] == 0 {
			t.Errorf("no %s event; events by kind: %v", k, kinds)
		}
	}
}

// offerFor finds an on-demand offer of the node's instance type.
func (n NodeInfo) offerFor(t *testing.T, sp *sim.Provider) model.Offer {
	t.Helper()
	offers, _ := sp.Offers(context.Background())
	for _, o := range offers {
		if o.InstanceType == n.InstanceType && o.Region == n.Region && o.CapacityType == model.OnDemand {
			return o
		}
	}
	return offers[0]
}
