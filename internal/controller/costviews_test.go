package controller

import (
	"context"
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

// TestEfficiencyAfterTheJobEnds: a job's SM activity reaches the ledger,
// so its cost and effective cost cover the same attempts, and its
// efficiency and effective cost stay readable once it has finished.
func TestEfficiencyAfterTheJobEnds(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,n1,16\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, newMemStore(), clk, func(c *Config) { c.Cost.Prices, c.Cost.MeterInterval = prices, -1 })
	h.register("n1", 2) // $8 per GPU-hour
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(agentapi.ReplicaStatus{ID: rs.ID, Phase: agentapi.PhaseRunning, StartedAt: clk.Now()})
	h.waitJob(j.ID, model.JobRunning)
	start := clk.Now()
	for range int(30 * time.Minute / (5 * time.Second)) {
		clk.Advance(5 * time.Second)
		now := clk.Now()
		if _, err := h.c.Sync(ctx, agentapi.SyncRequest{NodeID: h.node, Statuses: []agentapi.ReplicaStatus{running(rs.ID)}, Telemetry: telemetryOf(now, 2, 0.5, nil)}); err != nil {
			t.Fatal(err)
		}
		h.c.evaluate(now)
		if now.Sub(start)%(10*time.Minute) == 0 {
			if err := h.c.CostPass(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.sync(exitedAt(rs.ID, 0, "", start, clk.Now()))
	h.waitJob(j.ID, model.JobSucceeded)
	clk.Advance(5 * time.Second)
	h.c.evaluate(clk.Now()) // the tracker lets the ended attempt go
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}

	jc, ok := h.c.JobCost(j.ID)
	if !ok {
		t.Fatal("no ledger cost for the job")
	}
	// 30 min on 1 GPU at $8/h is $4 (to the cent: the split rounds per
	// stretch); half of its SM time was active.
	if diff := cmp.Diff([3]string{"$4.00", "$4.00", "$2.00"}, [3]string{jc.Total.USD(), jc.MeasuredCost.USD(), jc.EffectiveCost.USD()}); diff != "" {
		t.Errorf("ledger [cost, measured, effective] (-want +got)\n%s", diff)
	}
	e, ok := h.c.Efficiency(j.ID)
	if !ok {
		t.Fatal("no efficiency once the job has finished")
	}
	if e.SMActive == nil || *e.SMActive < 0.49 || *e.SMActive > 0.51 || e.CostMicros == nil || e.EffectiveCostMicros == nil {
		t.Fatalf("efficiency after the end: %+v", e)
	}
	if diff := cmp.Diff([2]int64{int64(jc.Total), int64(jc.EffectiveCost)}, [2]int64{*e.CostMicros, *e.EffectiveCostMicros}); diff != "" {
		t.Errorf("efficiency's [cost, effective cost] against the ledger's (-ledger +efficiency)\n%s", diff)
	}
}

// TestBudgetForecastEndsAtPeriodEnd: a budget's daily forecast is of its
// period: asked for 14 days with 1 day left, it has 1.
func TestBudgetForecastEndsAtPeriodEnd(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0) // 2026-11-30 09:00: the monthly period ends at midnight
	h := newCostHarness(t, clk, CostConfig{})
	set := &manifest.Set{Budgets: []manifest.Budget{{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget, Metadata: manifest.ObjectMeta{Name: "nlp"},
		Spec: manifest.BudgetSpec{Scope: model.BudgetScope{Project: "nlp"}, Amount: 100 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}}}}}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, days := range []int{14, 1} {
		bs := h.c.Budgets(days)
		if len(bs) != 1 {
			t.Fatalf("%d budgets", len(bs))
		}
		var got []string
		for _, d := range bs[0].Daily {
			got = append(got, d.Day.Format(time.DateOnly))
		}
		if diff := cmp.Diff([]string{"2026-11-30"}, got); diff != "" {
			t.Errorf("Budgets(%d): forecast days (-want +got)\n%s", days, diff)
		}
	}
}

// TestNodesCarryTheBilledPrice: a node's view carries what the ledger
// charges for it, the price file's row over its catalog price, so callers
// that show cost (a service's $/hour) agree with the bill.
func TestNodesCarryTheBilledPrice(t *testing.T) {
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,n1,16\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, newMemStore(), clock.NewFake(t0), func(c *Config) { c.Cost.Prices, c.Cost.MeterInterval = prices, -1 })
	h.register("n1", 2)
	h.register("n2", 2)
	got := map[string]model.Money{}
	src := map[string]model.PriceSource{}
	for _, n := range h.c.Nodes() {
		got[n.ID], src[n.ID] = n.Billed, n.BilledSource
	}
	if got["n1"] != model.FromDollars(16) || src["n1"] == SourceOwnedUnpriced {
		t.Errorf("n1 billed %v (%s), want the price file's $16", got["n1"], src["n1"])
	}
	if got["n2"] != 0 || src["n2"] != SourceOwnedUnpriced {
		t.Errorf("n2 billed %v (%s), want $0 owned-unpriced", got["n2"], src["n2"])
	}
}
