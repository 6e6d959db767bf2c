package controller

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// A node counts as heard only by a sync the server answers: one it
// refuses (a replica no longer sure it leads) or cannot answer in time
// leaves the node's last-seen time where the last answered sync put it,
// since the agent moves its fence only on an answer.
func TestUnansweredSyncDoesNotCountAsHeard(t *testing.T) {
	clk := clock.NewFake(t0)
	var leading atomic.Bool
	leading.Store(true)
	h := newHarness(t, newMemStore(), clk, func(c *Config) { c.Leading = leading.Load })
	node := h.register("", 1)
	h.sync()
	heard := clk.Now()
	lastSeen := func() time.Time {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.lastSeen[node]
	}

	clk.Advance(30 * time.Second)
	leading.Store(false)
	if _, err := h.c.Sync(context.Background(), agentapi.SyncRequest{NodeID: node}); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("Sync on a replica not sure it leads = %v, want ErrNotLeading", err)
	}
	if got := lastSeen(); !got.Equal(heard) {
		t.Errorf("after a refused sync the node was last seen at %s, want %s (the last answered sync)", got, heard)
	}

	leading.Store(true)
	h.sync()
	if got := lastSeen(); !got.Equal(clk.Now()) {
		t.Errorf("after an answered sync the node was last seen at %s, want %s", got, clk.Now())
	}
}

// TestEndedNodesAreForgotten: what the controller keeps in memory of an
// agent that sends its clock (its offset, when it was heard) goes with its
// node, lost to silence or ended with its instance; a late sync from an
// ended node's agent does not bring it back, and a lost node that
// registers again is timed anew.
func TestEndedNodesAreForgotten(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	c := newTermController(t, newMemStore(), clk, perGPUSecond(t), time.Minute)
	kept := func(id string) (out []string) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timed[id]; ok {
			out = append(out, "timed")
		}
		if _, ok := c.heard[id]; ok {
			out = append(out, "heard")
		}
		if _, ok := c.lastSeen[id]; ok {
			out = append(out, "lastSeen")
		}
		return out
	}
	register := func(id string) {
		t.Helper()
		if _, err := c.Register(ctx, agentapi.Registration{NodeID: id, Name: id, Provider: "static", CPU: 4}); err != nil {
			t.Fatal(err)
		}
	}
	sync := func(id string) {
		t.Helper()
		sent := clk.Now()
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: id, SentAt: &sent}); err != nil {
			t.Fatal(err)
		}
	}
	register("n1")
	register("n2")
	sync("n1")
	sync("n2")
	if got := kept("n1"); len(got) != 3 {
		t.Fatalf("a timed agent that synced is kept as %v, want timed, heard and lastSeen", got)
	}

	// n1 falls silent past the heartbeat timeout and is lost.
	clk.Advance(30 * time.Second)
	sync("n2")
	clk.Advance(45 * time.Second)
	c.checkNodes(ctx)
	c.mu.Lock()
	n1, _ := c.st.Node("n1")
	c.mu.Unlock()
	if n1.State != model.NodeLost {
		t.Fatalf("n1 is %s, want lost", n1.State)
	}
	if got := kept("n1"); len(got) != 0 {
		t.Errorf("lost n1 is still kept as %v", got)
	}

	// n2's instance ends; its agent, not yet gone, syncs once more.
	c.mu.Lock()
	n2, _ := c.st.Node("n2")
	b := &store.Batch{}
	c.nodeGoneLocked(n2, b, clk.Now(), nodeStop{why: "instance is gone"})
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kept("n2"); len(got) != 0 {
		t.Errorf("ended n2 is still kept as %v", got)
	}
	sync("n2")
	if got := kept("n2"); len(got) != 0 {
		t.Errorf("ended n2 is kept as %v after its agent's late sync, want nothing kept", got)
	}

	// n1 comes back.
	register("n1")
	sync("n1")
	if got := kept("n1"); !slices.Contains(got, "timed") {
		t.Errorf("n1 registered again and synced, kept as %v, want timed", got)
	}
}
