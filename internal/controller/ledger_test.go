package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestLedgerIsTheBill: an 8-GPU spot node boots, runs one attempt for 15 s,
// gets a notice and stops, all between two cost passes. The ledger bills
// the node from the provider's launch to its stop (boot time as idle), and
// the 15 s attempt is charged its seconds, not $0.
func TestLedgerIsTheBill(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	c, sp := newAWSScaleController(t, clk, model.Spot)
	ms := c.cfg.Store.(*memStore)
	if err := c.CostPass(ctx); err != nil { // starts the meter's clock
		t.Fatal(err)
	}
	j := submitTrain(t, c, func(s *model.JobSpec) {
		s.Spot = model.SpotRequired
		s.Estimate.Runtime = model.Duration(time.Hour)
	})
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(7 * time.Second) // the launch is not on a pass boundary
	c.scaleWait(ctx)
	clk.Advance(10 * time.Minute)
	c.scaleWait(ctx)
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	node := c.Nodes()[0]
	resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: node.ID})
	if err != nil || len(resp.Replicas) != 1 {
		t.Fatalf("desired set %+v, %v", resp, err)
	}
	rid := resp.Replicas[0].ID
	start := clk.Now()
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: node.ID, Statuses: []agentapi.ReplicaStatus{{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start}}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(15 * time.Second)
	if _, err := sp.Interrupt(ctx, node.Labels[model.LabelInstance]); err != nil {
		t.Fatal(err)
	}
	c.scaleWait(ctx)
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: node.ID, Statuses: []agentapi.ReplicaStatus{exitedAt(rid, 143, "", start, clk.Now())}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Minute) // past the notice's deadline: the instance stops
	c.scaleWait(ctx)
	if st := c.Nodes()[0].State; st != model.NodeTerminated {
		t.Fatalf("node %s, want terminated", st)
	}
	clk.Advance(time.Minute)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}

	usage, err := sp.Usage(ctx)
	if err != nil || len(usage) != 1 {
		t.Fatalf("usage %+v, %v", usage, err)
	}
	var total, attempt model.Money
	var secs, attemptSecs int64
	ms.mu.Lock()
	for _, e := range ms.ledger {
		total += e.Cost
		if e.Kind == model.LedgerIdle { // an idle entry spans its node's pass
			secs += e.Seconds
		}
		if e.JobID == j.ID {
			attempt += e.Cost
			attemptSecs += e.Seconds
		}
	}
	ms.mu.Unlock()
	if diff := cmp.Diff(usage[0].MicroUSD, int64(total)); diff != "" {
		t.Errorf("ledger total against the provider's bill (-bill +ledger)\n%s", diff)
	}
	if diff := cmp.Diff(usage[0].Seconds, secs); diff != "" {
		t.Errorf("seconds metered against seconds billed (-bill +ledger)\n%s", diff)
	}
	// The attempt held all 8 GPUs for 15 s: F(end) − F(start) on the
	// instance's clock, F(s) = round-half-up(price × s / 3600).
	p := int64(model.FromDollars(usage[0].Offer.PricePerHour))
	f := func(d time.Duration) int64 { s := int64(d / time.Second); return (p*s + 1800) / 3600 }
	want := f(start.Sub(usage[0].Start)+15*time.Second) - f(start.Sub(usage[0].Start))
	if attemptSecs != 15 || int64(attempt) != want {
		t.Errorf("the 15 s attempt was metered %d s for %s, want 15 s for %s", attemptSecs, attempt, model.Money(want))
	}
}

// TestHardBudgetNeedsRuntimeLimit: a hard budget has no loophole. A GPU
// job in its scope without spec.limits.runtime is refused with a field
// error naming that field; with a limit it is priced and admitted or
// refused by its worst case, in dollars and cents; other scopes are free.
func TestHardBudgetNeedsRuntimeLimit(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,own,28.8\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newCostHarness(t, clk, CostConfig{Prices: prices})
	h.registerNode("own", 2, model.Owned) // $14.40 per GPU-hour
	set := &manifest.Set{Budgets: []manifest.Budget{{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget, Metadata: manifest.ObjectMeta{Name: "nlp"},
		Spec: manifest.BudgetSpec{Scope: model.BudgetScope{Project: "nlp"}, Amount: 100 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}, Hard: true}}}}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		project string
		runtime time.Duration
		field   string // the field error's path; "" and !refused: admitted
		refused string // the refusal's text (without the field error)
	}{
		"no runtime limit": {project: "nlp", field: "spec.limits.runtime"},
		"within budget":    {project: "nlp", runtime: 6 * time.Hour},
		"over budget": {project: "nlp", runtime: 12 * time.Hour,
			refused: "budget nlp (project=nlp) is hard: worst-case cost $172.80 (1 GPUs × $14.40/GPU-hour × 12h0m0s) on top of $0.00 spent would exceed $100.00 before 2026-12-01: refused by budget"},
		"other project without a limit": {project: "vision"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			spec := model.JobSpec{Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}}
			spec.Limits.Runtime = model.Duration(tt.runtime)
			spec.Default()
			_, _, err := h.c.Submit(ctx, Submission{Project: tt.project, User: "u", Spec: spec})
			var fe model.FieldErrors
			switch {
			case tt.field != "":
				if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != tt.field || !errors.Is(err, ErrBudget) || !strings.Contains(fe[0].Message, "set it") {
					t.Errorf("err = %v, want a budget field error on %s saying what to do", err, tt.field)
				}
			case tt.refused != "":
				if err == nil || err.Error() != tt.refused || !errors.Is(err, ErrBudget) {
					t.Errorf("err = %v\nwant %s", err, tt.refused)
				}
			case err != nil:
				t.Errorf("refused: %v", err)
			}
		})
	}
}
