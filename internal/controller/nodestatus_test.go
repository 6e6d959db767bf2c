package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestQuietChecksLoseEachSilentNodeOnTime: checkNodes skips its walk until
// the first heard node could fall silent; each silent node is lost at its
// own timeout, and one heard since is kept past it.
func TestQuietChecksLoseEachSilentNodeOnTime(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	ctx := context.Background()
	state := func(id string) model.NodeState {
		t.Helper()
		_, st, ok := h.c.NodeStatus(id)
		if !ok {
			return "unknown"
		}
		return st
	}
	var a, b, c string
	check := func(at time.Duration, want ...model.NodeState) {
		t.Helper()
		clk.Set(t0.Add(at))
		h.c.checkNodes(ctx)
		for i, id := range []string{a, b, c} {
			if got := state(id); got != want[i] {
				t.Errorf("at %s node %d (%s) is %s, want %s", at, i, id, got, want[i])
			}
		}
	}
	ready, lost := model.NodeReady, model.NodeLost
	a = h.register("node-a", 1)
	check(0, ready, "unknown", "unknown")
	clk.Set(t0.Add(20 * time.Second))
	b = h.register("node-b", 1)
	clk.Set(t0.Add(30 * time.Second))
	c = h.register("node-c", 1)
	check(30*time.Second, ready, ready, ready) // heard at 0, 20 and 30 s
	clk.Set(t0.Add(45 * time.Second))
	h.node = c
	h.sync() // c heard at 45 s
	check(45*time.Second, ready, ready, ready)
	check(61*time.Second, lost, ready, ready)
	check(79*time.Second, lost, ready, ready)
	check(81*time.Second, lost, lost, ready)
	check(100*time.Second, lost, lost, ready) // c silent 55 s
	check(106*time.Second, lost, lost, lost)
}

// TestMovedNodesListsEachMoveOnce: MovedNodes lists a node once after its
// desired set moved and not again until it moves anew, and its state
// number moves with registrations and state changes only.
func TestMovedNodesListsEachMoveOnce(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	if ids, _ := h.c.MovedNodes(nil); len(ids) != 0 {
		t.Fatalf("first call listed %v, want none (it starts the tracking)", ids)
	}
	a := h.register("node-a", 1)
	ids, g1 := h.c.MovedNodes(nil)
	if !slices.Equal(ids, []string{a}) {
		t.Fatalf("after registration: %v, want [%s]", ids, a)
	}
	if ids, g := h.c.MovedNodes(nil); len(ids) != 0 || g != g1 {
		t.Fatalf("nothing changed: %v and state number %d (was %d), want none and the same", ids, g, g1)
	}
	h.node = a
	h.submit(cmdSpec(1))
	h.waitDesired(1)
	ids, g := h.c.MovedNodes(nil)
	if !slices.Equal(ids, []string{a}) || g != g1 {
		t.Fatalf("after a placement: %v and state number %d (was %d), want [%s] and the same", ids, g, g1, a)
	}
	clk := h.c.cfg.Clock.(*clock.Fake)
	clk.Set(t0.Add(2 * time.Minute))
	h.c.checkNodes(context.Background()) // a is lost
	if _, g := h.c.MovedNodes(nil); g == g1 {
		t.Fatalf("state number %d unchanged after node a was lost", g)
	}
}
