package controller

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/store"
)

// twoPoolController is a controller on st whose pools east and west are
// both of driver "cloud", each with a driver of its own (as two aws pools
// in two regions get two EC2 clients): east sells cloudA, west cloudC.
func twoPoolController(t *testing.T, clk *clock.Fake, st store.Store, east, west *fakeCloud) *Controller {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Driver{Name: "cloud", New: func(p *model.NodePool) (provider.Provider, error) {
		if p.Name == "east" {
			return east, nil
		}
		return west, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clk, CheckpointDir: t.TempDir(), PassGap: -1,
		HeartbeatTimeout: time.Hour, Fatal: func(err error) { t.Errorf("fatal: %v", err) },
		Scale: ScaleConfig{Drivers: reg, LaunchTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var twoPools = []*model.NodePool{
	{Name: "east", Spec: model.NodePoolSpec{Provider: "cloud", Min: 1, Max: 2}},
	{Name: "west", Spec: model.NodePoolSpec{Provider: "cloud", Min: 1, Max: 2}},
}

// TestTwoPoolsOfOneDriver: two pools of one driver each launch into their
// own driver, see their own instances alive (neither takes the other's
// for gone), and removing one terminates its instance only, through its
// own driver.
func TestTwoPoolsOfOneDriver(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	east := &fakeCloud{offers: []model.Offer{cloudA}}
	west := &fakeCloud{offers: []model.Offer{cloudC}}
	st := openSQLite(t, filepath.Join(t.TempDir(), "gpufleet.db"))
	defer st.Close()
	c := twoPoolController(t, clk, st, east, west)
	defer c.Close()
	c.mu.Lock()
	c.fleet.pools = twoPools
	c.mu.Unlock()

	c.scaleWait(ctx)
	if len(east.insts) != 1 || len(west.insts) != 1 {
		t.Fatalf("instances: east %+v, west %+v; want one each (min 1)", east.insts, west.insts)
	}
	east.run()
	west.run()
	for range 2 {
		c.scaleWait(ctx)
	}
	byPool := map[string]NodeInfo{}
	for _, n := range c.Nodes() {
		if n.State == model.NodeTerminated {
			t.Fatalf("node %s of pool %s terminated: %+v", n.ID, n.Pool, c.Events(EventFilter{}))
		}
		byPool[n.Pool] = n
	}
	if len(byPool) != 2 || byPool["east"].Labels[model.LabelInstance] != east.insts[0].ID || byPool["west"].Labels[model.LabelInstance] != west.insts[0].ID {
		t.Fatalf("nodes by pool: %+v", byPool)
	}
	if byPool["east"].State != model.NodeReady || byPool["west"].State != model.NodeReady {
		t.Fatalf("states: east %s, west %s; want both ready", byPool["east"].State, byPool["west"].State)
	}
	if len(east.terminated)+len(west.terminated) != 0 {
		t.Fatalf("terminated: east %v, west %v; want none", east.terminated, west.terminated)
	}

	// West goes: its instance is terminated by west's driver; east's stays.
	b := &store.Batch{}
	c.mu.Lock()
	c.retirePoolsLocked(b, c.fleet.pools, twoPools[:1])
	c.fleet.pools = twoPools[:1]
	c.mu.Unlock()
	c.scaleWait(ctx)
	westID := byPool["west"].Labels[model.LabelInstance]
	if !slices.Equal(west.terminated, []string{westID}) || len(east.terminated) != 0 {
		t.Fatalf("terminated: east %v, west %v; want west's %s only", east.terminated, west.terminated, westID)
	}
	for _, n := range c.Nodes() {
		if want := n.Pool == "west"; (n.State == model.NodeTerminated) != want {
			t.Errorf("node %s of pool %s is %s", n.ID, n.Pool, n.State)
		}
	}
}

func (f *fakeCloud) run() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.insts {
		f.insts[i].State = provider.StateRunning
	}
}

// TestRemovedPoolSurvivesARestart: the revision removing a pool records
// its retirement with it, so a controller restarted on the same store
// before the pool's instances are terminated still terminates them, and
// then forgets the pool for good.
func TestRemovedPoolSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	east, west := &fakeCloud{offers: []model.Offer{cloudA}}, &fakeCloud{offers: []model.Offer{cloudC}}
	st := openSQLite(t, filepath.Join(t.TempDir(), "gpufleet.db"))
	defer st.Close()
	pool := func(name string) manifest.NodePool {
		return manifest.NodePool{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindNodePool, Metadata: manifest.ObjectMeta{Name: name},
			Spec: model.NodePoolSpec{Provider: "cloud", Min: 1, Max: 2}}
	}
	c := twoPoolController(t, clk, st, east, west)
	if _, err := c.ApplyFleet(ctx, &manifest.Set{NodePools: []manifest.NodePool{pool("east"), pool("west")}}, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	c.scaleWait(ctx)
	if len(east.insts) != 1 || len(west.insts) != 1 {
		t.Fatalf("instances: east %+v, west %+v; want one each", east.insts, west.insts)
	}
	westID := west.insts[0].ID
	if _, err := c.ApplyFleet(ctx, &manifest.Set{NodePools: []manifest.NodePool{pool("east")}}, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	// The server stops before a scale cycle terminates west's instance.
	c.Close()
	if len(west.terminated) != 0 {
		t.Fatalf("terminated before the restart: %v", west.terminated)
	}

	c = twoPoolController(t, clk, st, east, west)
	c.scaleWait(ctx)
	if !slices.Equal(west.terminated, []string{westID}) || len(east.terminated) != 0 {
		t.Fatalf("after the restart, terminated: east %v, west %v; want west's %s", east.terminated, west.terminated, westID)
	}
	c.scaleWait(ctx) // no live node of west is left: it is forgotten
	c.Close()
	c = twoPoolController(t, clk, st, east, west)
	defer c.Close()
	c.mu.Lock()
	retired := len(c.scaleSt.retired)
	c.mu.Unlock()
	if retired != 0 {
		t.Errorf("%d retired pools loaded after west's instances were gone, want 0", retired)
	}
	c.scaleWait(ctx)
	if len(west.terminated) != 1 {
		t.Errorf("west's instances terminated %d times, want once", len(west.terminated))
	}
}
