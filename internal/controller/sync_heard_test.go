package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
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
