package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

const ownedPool = `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: owned}
spec:
  provider: static
  static:
    machines:
      - {name: box-1, address: "10.0.0.1:7000", gpus: 8xH100, pricePerHour: 12}
      - {name: box-2, address: 10.0.0.2, gpus: 4xA100-80GB, pricePerHour: 5}
`

// TestStaticPoolsDriveTheStaticProvider: applying a NodePool of provider
// static makes the static provider's machines, offers and inventory those
// of the pool; its machines join by registering their agents (node id =
// machine name), and drift reports machines without an agent until they
// do, and an agent that no pool lists. Dropping the pool empties the
// provider again.
func TestStaticPoolsDriveTheStaticProvider(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := static.NewPools(nil, clk.Now())
	c, err := New(ctx, Config{Store: newMemStore(), Logs: logs, Clock: clk, PassGap: -1, HeartbeatTimeout: time.Hour,
		Fatal:        func(err error) { t.Errorf("fatal: %v", err) },
		PoolsChanged: st.SetPools,
		Machines:     st.Machines,
		Adopters:     map[string]provider.Adopter{static.Name: st}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if m, _ := st.Machines(ctx); len(m) != 0 {
		t.Fatalf("before any apply the static provider has %d machines", len(m))
	}

	// 1. Apply the pool: the provider follows it.
	set, fe := manifest.Parse([]manifest.Source{{Name: "owned.yaml", Data: []byte(ownedPool), Format: manifest.YAML}}, manifest.Checks{Pool: static.CheckPool})
	if fe != nil {
		t.Fatal(fe)
	}
	applyAt := clk.Now()
	if _, err := c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	machines, _ := st.Machines(ctx)
	wantMachines := []model.Node{
		{ID: "box-1", Name: "box-1", Provider: static.Name, Pool: "owned", Region: static.Region, CapacityType: model.Owned, PricePerHour: 12,
			Labels: map[string]string{static.LabelAddress: "10.0.0.1", static.LabelPool: "owned"},
			GPUs:   gpus(8, "H100")},
		{ID: "box-2", Name: "box-2", Provider: static.Name, Pool: "owned", Region: static.Region, CapacityType: model.Owned, PricePerHour: 5,
			Labels: map[string]string{static.LabelAddress: "10.0.0.2", static.LabelPool: "owned"},
			GPUs:   gpus(4, "A100-80GB")},
	}
	if diff := cmp.Diff(wantMachines, machines); diff != "" {
		t.Errorf("static machines after apply (-want +got):\n%s", diff)
	}
	offers, _ := st.Offers(ctx)
	if len(offers) != 2 || offers[0].GPU != "H100" || offers[0].GPUCount != 8 || offers[0].PricePerHour != 12 || offers[1].GPU != "A100-80GB" {
		t.Errorf("static offers after apply: %+v", offers)
	}
	inv, _ := st.List(ctx)
	if len(inv) != 2 || inv[0].ID != "box-1" || inv[1].ID != "box-2" || !inv[0].LaunchedAt.Equal(applyAt) {
		t.Errorf("static inventory after apply: %+v", inv)
	}
	issues := func() []string {
		t.Helper()
		fs, err := c.Drift(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fs {
			out = append(out, f.Kind+"/"+f.Name+" "+f.Issue+": "+f.Detail)
		}
		return out
	}
	stray := "Node/stray " + fleet.UnmanagedNode + ": owned machine stray (agent lab-pc, provider static) is listed in no pool: add it to one, or stop its agent"
	missing := func(m, _ string) string {
		return "NodePool/owned " + fleet.MachineMissing + ": machine " + m + " (static) has no node; is its agent running?"
	}
	want := []string{
		"NodePool/owned " + fleet.BelowMin + ": 0 live nodes, min 2",
		missing("box-1", "10.0.0.1:7000"),
		missing("box-2", "10.0.0.2"),
	}
	if diff := cmp.Diff(want, issues()); diff != "" {
		t.Errorf("drift before any agent registers (-want +got):\n%s", diff)
	}

	// 2. box-1's agent registers (its hostname differs from its node id);
	// so does an agent no pool lists.
	register := func(id, name string, gpuCount int) {
		t.Helper()
		if _, err := c.Register(ctx, agentapi.Registration{NodeID: id, Name: name, Provider: static.Name, GPUs: gpus(gpuCount, "H100"), CapacityType: model.Owned}); err != nil {
			t.Fatal(err)
		}
	}
	register("box-1", "gpu-host-a", 8)
	register("stray", "lab-pc", 1)
	want = []string{stray, "NodePool/owned " + fleet.BelowMin + ": 1 live nodes, min 2", missing("box-2", "10.0.0.2")}
	if diff := cmp.Diff(want, issues()); diff != "" {
		t.Errorf("drift with box-1 and a stray agent (-want +got):\n%s", diff)
	}
	if n := nodeByID(c, "box-1"); n.Pool != "owned" || n.PricePerHour != 12 {
		t.Errorf("box-1 joined pool %q at $%.2f/h, want owned at $12", n.Pool, n.PricePerHour)
	}

	// 3. box-2 registers: the declared fleet is whole, but for the stray.
	register("box-2", "gpu-host-b", 4)
	if diff := cmp.Diff([]string{stray}, issues()); diff != "" {
		t.Errorf("drift with every machine registered (-want +got):\n%s", diff)
	}

	// 4. An apply without the pool empties the provider; the registered
	// machines leave the pool.
	clk.Advance(time.Minute)
	if _, err := c.ApplyFleet(ctx, &manifest.Set{}, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if m, _ := st.Machines(ctx); len(m) != 0 {
		t.Errorf("after dropping the pool the static provider still has %d machines", len(m))
	}
	if n := nodeByID(c, "box-1"); n.Pool != "" {
		t.Errorf("box-1 is still in pool %q after the pool was dropped", n.Pool)
	}
	// 5. A rollback brings it back, and box-1 rejoins.
	if _, err := c.Rollback(ctx, 1, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if m, _ := st.Machines(ctx); len(m) != 2 {
		t.Errorf("after rolling back the static provider has %d machines, want 2", len(m))
	}
	if n := nodeByID(c, "box-1"); n.Pool != "owned" {
		t.Errorf("box-1 is in pool %q after the rollback, want owned", n.Pool)
	}
}

func gpus(n int, gpuModel string) []model.GPU {
	var out []model.GPU
	for i := range n {
		out = append(out, model.GPU{Index: i, Model: gpuModel})
	}
	return out
}

func nodeByID(c *Controller, id string) *model.Node {
	for _, n := range c.Nodes() {
		if n.ID == id {
			return n.Node
		}
	}
	return &model.Node{}
}
