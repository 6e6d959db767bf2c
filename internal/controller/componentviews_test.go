package controller

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
)

// TestComponentReadsDoNotWaitOnTheControllerLock: the views served by the
// controller's components (revisions, ledger, budgets, telemetry's alerts,
// the outbox) answer while the controller's mutex is held, as it is by a
// scheduling pass or an agent sync. A view that took the mutex again
// would block here until the deadline.
func TestComponentReadsDoNotWaitOnTheControllerLock(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	c := h.c
	reads := map[string]func(){
		"Revisions": func() { c.Revisions() },
		"Revision":  func() { _, _ = c.Revision(1) },
		"Declared":  func() { c.Declared() },
		"Projects":  func() { c.Projects() },
		"CostReport": func() {
			_, _ = c.CostReport(cost.Query{From: t0.Add(-time.Hour), To: t0})
		},
		"JobCost":        func() { c.JobCost("j") },
		"HourlyGPUUsage": func() { c.HourlyGPUUsage(1) },
		"Budgets":        func() { c.Budgets(0) },
		"CostTotals":     func() { c.CostTotals() },
		"Alerts":         func() { c.Alerts() },
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, read := range reads {
		done := make(chan struct{})
		go func() { read(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s waited on the controller's mutex", name)
		}
	}
}
