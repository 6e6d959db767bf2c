package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
)

// newScaleController returns a controller, not running (the test drives
// pass and scale by hand), whose pool "gpu" launches up to 4 sim nodes of
// the given capacity types on sp and retires them after idle.
func newScaleController(t *testing.T, clk *clock.Fake, sp *sim.Provider, idle time.Duration, capacity ...model.CapacityType) *Controller {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: newMemStore(), Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		Offers: func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o },
		Scale:  ScaleConfig{Providers: []provider.Provider{sp}, Drivers: simRegistry(t, sp), LaunchTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.mu.Lock()
	c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Max: 4,
		CapacityTypes: capacity, IdleTimeout: model.Duration(idle)}}}
	c.mu.Unlock()
	return c
}

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
	c := newScaleController(t, clk, sp, 10*time.Minute, model.OnDemand, model.Spot)

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
	c.scaleWait(ctx)
	nodes := c.Nodes()
	if len(nodes) != 1 || nodes[0].State != model.NodeLaunching || nodes[0].Labels[model.LabelInstance] == "" {
		t.Fatalf("after launch: nodes %+v", nodes)
	}
	// A second cycle while it boots launches nothing more.
	c.scaleWait(ctx)
	if n := len(c.Nodes()); n != 1 {
		t.Fatalf("a booting node's job got another launch: %d nodes", n)
	}
	// 2. Boot, ready, bound.
	clk.Advance(10 * time.Minute)
	c.scaleWait(ctx)
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
	c.scaleWait(ctx)
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
	leak, err := sp.Launch(ctx, provider.LaunchRequest{Offer: offerFor(t, c.Nodes()[0], sp), Token: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Minute)
	c.scaleWait(ctx)
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
func offerFor(t *testing.T, n NodeInfo, sp *sim.Provider) model.Offer {
	t.Helper()
	offers, _ := sp.Offers(context.Background())
	for _, o := range offers {
		if o.InstanceType == n.InstanceType && o.Region == n.Region && o.CapacityType == model.OnDemand {
			return o
		}
	}
	return offers[0]
}

// TestScaleGangNotice: a spot notice on one node of a two-node gang stops
// the whole gang with its checkpoint signal and grace; the attempt ends
// preempted, and the job restarts as a whole (every rank, the next attempt
// number, the same GPUFLEET_CHECKPOINT_DIR) on fresh capacity.
func TestScaleGangNotice(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	// No random interruptions or failures: the notice is the one this
	// test gives.
	scn, err := sim.ParseScenario([]byte("offers:\n  - match: {capacityType: spot}\n    interruptionRate: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := sim.New(sim.Config{Clock: clk, Seed: 3, Providers: []string{"aws"}, Scenario: scn, Offers: busiestRegions(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c := newScaleController(t, clk, sp, time.Hour, model.Spot)

	spec := model.JobSpec{Replicas: 2, Spot: model.SpotRequired}
	spec.Resources.GPUs = 8
	spec.Run.Command = []string{"torchrun", "train.py"}
	spec.Estimate.Runtime = model.Duration(2 * time.Hour)
	spec.Checkpoint = model.Checkpoint{Interval: model.Duration(10 * time.Minute), Signal: "SIGUSR1", Grace: model.Duration(90 * time.Second)}
	spec.Default()
	j, _, err := c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}

	// cycle runs a scale cycle and a pass, then syncs every live node;
	// it returns the desired replicas of the job by node.
	cycle := func() map[string][]agentapi.ReplicaSpec {
		t.Helper()
		c.scaleWait(ctx)
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
		out := map[string][]agentapi.ReplicaSpec{}
		for _, n := range c.Nodes() {
			if n.State != model.NodeReady && n.State != model.NodeDraining {
				continue
			}
			resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: n.ID})
			if err != nil {
				t.Fatal(err)
			}
			out[n.ID] = resp.Replicas
		}
		return out
	}
	// started waits (on the fake clock) for both ranks of attempt n to be
	// desired, one per node, reports them running and returns them.
	started := func(n int) []agentapi.ReplicaSpec {
		t.Helper()
		for range 30 {
			var ranks []agentapi.ReplicaSpec
			for _, rs := range cycle() {
				for _, r := range rs {
					if r.Attempt == n && !r.Stop {
						ranks = append(ranks, r)
					}
				}
			}
			if len(ranks) == 2 {
				slices.SortFunc(ranks, func(a, b agentapi.ReplicaSpec) int { return a.Rank - b.Rank })
				for _, r := range ranks {
					node := nodeOfReplica(t, c, r.ID)
					if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: node, Statuses: []agentapi.ReplicaStatus{running(r.ID)}}); err != nil {
						t.Fatal(err)
					}
				}
				return ranks
			}
			clk.Advance(time.Minute)
		}
		t.Fatalf("attempt %d of the gang never started on two nodes; nodes %+v", n, c.Nodes())
		return nil
	}

	first := started(1)
	nodes := []string{nodeOfReplica(t, c, first[0].ID), nodeOfReplica(t, c, first[1].ID)}
	if nodes[0] == nodes[1] {
		t.Fatalf("both ranks on node %s; want one 8-GPU node each", nodes[0])
	}
	dir := first[0].Env["GPUFLEET_CHECKPOINT_DIR"]
	if dir == "" || first[1].Env["GPUFLEET_CHECKPOINT_DIR"] != dir {
		t.Fatalf("ranks have checkpoint dirs %q and %q", dir, first[1].Env["GPUFLEET_CHECKPOINT_DIR"])
	}
	clk.Advance(15 * time.Minute)
	if _, err := c.Checkpoint(ctx, j.ID); err != nil {
		t.Fatal(err)
	}

	// 1. Rank 1's node gets a spot notice.
	var instance string
	for _, n := range c.Nodes() {
		if n.ID == nodes[1] {
			instance = n.Labels[model.LabelInstance]
		}
	}
	nt, err := sp.Interrupt(ctx, instance)
	if err != nil {
		t.Fatal(err)
	}
	// 2. The next cycle drains that node and stops both ranks, each with
	// the job's checkpoint signal and grace, on both nodes.
	desired := cycle()
	for i, node := range nodes {
		rs := desired[node]
		if len(rs) != 1 || rs[0].ID != first[i].ID || !rs[0].Stop || rs[0].Signal != "SIGUSR1" || rs[0].Grace != model.Duration(90*time.Second) {
			t.Fatalf("rank %d on node %s after the notice: desired %+v; want it stopped with SIGUSR1 and 90s grace", i, node, rs)
		}
	}
	for _, n := range c.Nodes() {
		if n.ID == nodes[1] && n.State != model.NodeDraining {
			t.Errorf("noticed node is %s, want draining", n.State)
		}
		if n.ID == nodes[0] && n.State != model.NodeReady {
			t.Errorf("the other node is %s, want ready", n.State)
		}
	}
	// 3. Both ranks exit on the signal inside the grace period; the
	// attempt ends preempted and the job is queued again.
	clk.Advance(30 * time.Second)
	for i, node := range nodes {
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: node, Statuses: []agentapi.ReplicaStatus{exited(first[i].ID, 143, agentapi.ReasonStopped)}}); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := c.Job(j.ID)
	if got.State != model.JobQueued || got.Attempts != 1 || got.Preemptions != 1 {
		t.Fatalf("job after the notice: %s, %d attempts, %d preemptions; want queued, 1, 1", got.State, got.Attempts, got.Preemptions)
	}
	atts, _ := c.Attempts(j.ID)
	if len(atts) != 1 || atts[0].State != model.AttemptPreempted {
		t.Fatalf("attempts %+v; want one, preempted", atts)
	}

	// 4. The instance stops at its deadline; the gang restarts whole, as
	// attempt 2, with the same checkpoint dir, on the surviving node and a
	// new one.
	clk.Advance(nt.Deadline.Sub(clk.Now()))
	second := started(2)
	for i, r := range second {
		if r.Rank != i || r.Env["GPUFLEET_ATTEMPT"] != "2" || r.Env["WORLD_SIZE"] != "2" || r.Env["GPUFLEET_CHECKPOINT_DIR"] != dir {
			t.Errorf("rank %d of attempt 2: rank %d, GPUFLEET_ATTEMPT=%s WORLD_SIZE=%s GPUFLEET_CHECKPOINT_DIR=%q; want %d, 2, 2, %q",
				i, r.Rank, r.Env["GPUFLEET_ATTEMPT"], r.Env["WORLD_SIZE"], r.Env["GPUFLEET_CHECKPOINT_DIR"], i, dir)
		}
		if node := nodeOfReplica(t, c, r.ID); node == nodes[1] {
			t.Errorf("rank %d of attempt 2 is on the noticed node %s", i, node)
		}
	}
	got, _ = c.Job(j.ID)
	if got.State != model.JobRunning || got.Attempts != 2 {
		t.Errorf("job after restart: %s, %d attempts; want running, 2", got.State, got.Attempts)
	}
}

// nodeOfReplica returns the node a replica id is bound to.
func nodeOfReplica(t *testing.T, c *Controller, id string) string {
	t.Helper()
	attemptID, rank, ok := splitReplicaID(id)
	if !ok {
		t.Fatalf("replica id %q", id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.st.Attempt(attemptID)
	if !ok || rank >= len(a.Replicas) {
		t.Fatalf("no replica %s", id)
	}
	return a.Replicas[rank].NodeID
}

// TestScaleLaunchesWhatThePoolAdmits: the scheduler ranks only offers a
// pool could launch, so an Azure-only pool launches for an H100 job even
// when cheaper clouds fill the first candidates, and a pool limited to
// us-* is never shown a candidate elsewhere (issue #14 item 7).
func TestScaleLaunchesWhatThePoolAdmits(t *testing.T) {
	tests := map[string]struct {
		pool model.NodePoolSpec
		want func(o model.Offer) bool
	}{
		"azure only": {
			pool: model.NodePoolSpec{Provider: model.ProviderSim, Max: 4, Sim: &model.SimPoolSettings{Clouds: []string{"azure"}}},
			want: func(o model.Offer) bool { return o.Provider == "azure" },
		},
		"us regions only": {
			pool: model.NodePoolSpec{Provider: model.ProviderSim, Max: 4, Regions: model.RegionPolicy{Allow: []string{"us-*"}}},
			want: func(o model.Offer) bool { return len(o.Region) > 3 && o.Region[:3] == "us-" },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			sp, err := sim.New(sim.Config{Clock: clk, Seed: 7, Providers: []string{"aws", "gcp", "azure", "lambda"}})
			if err != nil {
				t.Fatal(err)
			}
			c := newScaleController(t, clk, sp, 10*time.Minute, model.OnDemand)
			c.mu.Lock()
			tc.pool.CapacityTypes = []model.CapacityType{model.OnDemand}
			c.fleet.pools = []*model.NodePool{{Name: "gpu", Spec: tc.pool}}
			c.mu.Unlock()
			j := submitTrain(t, c, func(s *model.JobSpec) { s.Resources.GPU.Models = []string{"H100"} })
			if err := c.pass(ctx); err != nil {
				t.Fatal(err)
			}
			e, err := c.Explain(j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if e.Candidate == nil || len(e.Candidate.Offers) == 0 {
				t.Fatalf("no candidate; verdict %+v", e.Verdict)
			}
			for _, o := range e.Candidate.Offers {
				if !tc.want(o) {
					t.Errorf("candidate offer %s/%s is outside the pool", o.Provider, o.Region)
				}
			}
			c.scaleWait(ctx)
			nodes := c.Nodes()
			if len(nodes) != 1 {
				t.Fatalf("after scale: %d nodes, want 1 launched", len(nodes))
			}
			if n := nodes[0]; !tc.want(model.Offer{Provider: n.Labels[labelOffer], Region: n.Region}) {
				t.Errorf("launched %s/%s, outside the pool", n.Labels[labelOffer], n.Region)
			}
		})
	}
}

// TestExplainShowsLaunchBackoffs: offers whose launches failed lately are
// in explain, the one last tried for the job first, until their back-off
// ends (issue #14 item 4).
func TestExplainShowsLaunchBackoffs(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	c, _ := newAWSScaleController(t, clk, model.OnDemand)
	j := submitTrain(t, c, func(s *model.JobSpec) { s.Resources.GPU.Models = []string{"H100"} })
	mine := model.Offer{Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", InstanceType: "p5.48xlarge", CapacityType: model.Spot}
	other := model.Offer{Provider: "aws", Region: "us-west-2", Zone: "us-west-2b", InstanceType: "p4d.24xlarge", CapacityType: model.OnDemand}
	c.mu.Lock()
	c.scaleSt.memory.Fail(other, "j-someoneelse", clk.Now())
	c.scaleSt.memory.Fail(mine, j.ID, clk.Now())
	c.scaleSt.memory.Fail(mine, j.ID, clk.Now())
	c.mu.Unlock()
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := c.Explain(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range e.LaunchBackoffs {
		got = append(got, fmt.Sprintf("%s %d %v", b.Offer, b.Failures, b.ForJob))
	}
	want := []string{"aws/us-east-1/us-east-1a/p5.48xlarge/spot 2 true", "aws/us-west-2/us-west-2b/p4d.24xlarge/on-demand 1 false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("launch back-offs (-want +got):\n%s", diff)
	}
	clk.Advance(time.Hour)
	if e, _ = c.Explain(j.ID); len(e.LaunchBackoffs) != 0 {
		t.Errorf("back-offs past their end: %+v", e.LaunchBackoffs)
	}
}

// newAWSScaleController is newScaleController on a simulated AWS alone.
func newAWSScaleController(t *testing.T, clk *clock.Fake, capacity ...model.CapacityType) (*Controller, *sim.Provider) {
	t.Helper()
	sp, err := sim.New(sim.Config{Clock: clk, Seed: 7, Providers: []string{"aws"}})
	if err != nil {
		t.Fatal(err)
	}
	return newScaleController(t, clk, sp, 10*time.Minute, capacity...), sp
}

// submitTrain submits a one-replica 8-GPU job running "train", changed by
// edit before its defaults are filled in.
func submitTrain(t *testing.T, c *Controller, edit func(*model.JobSpec)) *model.Job {
	t.Helper()
	spec := model.JobSpec{Replicas: 1}
	spec.Resources.GPUs = 8
	spec.Run.Command = []string{"train"}
	edit(&spec)
	spec.Default()
	j, _, err := c.Submit(context.Background(), Submission{Project: "default", User: "test", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// scaleWait runs one scale cycle and waits for the launches it queued, so
// a test sees their outcome as the next cycle would.
func (c *Controller) scaleWait(ctx context.Context) {
	c.scale(ctx)
	c.WaitLaunches()
}

// simRegistry registers the sim driver as the server's wiring does: each
// pool gets sp narrowed to its clouds.
func simRegistry(t testing.TB, sp *sim.Provider) *registry.Registry {
	t.Helper()
	r, err := registry.New(registry.Driver{Name: model.ProviderSim, New: sp.ForPool, Price: sim.PoolPrice})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
