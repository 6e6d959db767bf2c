package sqlite

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestCostRoundTrip: the ledger comes back whole and in append order, fired
// keys once however often stored, metric reports with non-finite values,
// and only the undelivered notifications (a delivered one is a tombstone).
func TestCostRoundTrip(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, Options{})
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	alloc := model.LedgerEntry{Kind: model.LedgerAllocation, NodeID: "n-1", Pool: "gpu", Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge",
		GPUModel: "H100", CapacityType: model.Spot, PriceSource: model.PriceCatalog, PricePerHour: 98_320_000,
		JobID: "j-1", AttemptID: "a-1", Attempt: 1, Project: "nlp", User: "ada", Queue: "batch", Tags: map[string]string{"team": "nlp"},
		GPUs: 4, CPU: 32, From: t0, To: t0.Add(time.Hour), Seconds: 3600, GPUSeconds: 4 * 3600, Cost: 49_160_000,
		EffectiveCost: 36_870_000, SMActive: 0.75, Telemetry: true}
	idle := model.LedgerEntry{Kind: model.LedgerIdle, NodeID: "n-1", Pool: "gpu", Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge",
		GPUModel: "H100", CapacityType: model.Spot, PriceSource: model.PriceCatalog, PricePerHour: 98_320_000,
		From: t0, To: t0.Add(time.Hour), Seconds: 3600, GPUSeconds: 4 * 3600, Cost: 49_160_000}
	owned := model.LedgerEntry{Kind: model.LedgerIdle, NodeID: "n-2", CapacityType: model.Owned, PriceSource: "owned-unpriced",
		From: t0.Add(time.Hour), To: t0.Add(90 * time.Minute), Seconds: 1800}
	fired := model.FiredKey{Budget: "nlp-monthly", Threshold: 1, PeriodStart: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	metrics := []store.MetricReport{
		{JobID: "j-1", Seq: 1, Attempt: 1, Step: 10, Values: store.MetricValues{"loss": 1.25, "acc": 0.5}, At: t0.Add(time.Minute)},
		{JobID: "j-1", Seq: 2, Attempt: 1, Step: 11, Values: store.MetricValues{"loss": math.NaN(), "grad": math.Inf(1)}, At: t0.Add(2 * time.Minute)},
	}
	pending := &store.Notification{ID: "nlp-monthly/1/2026-03-01", Kind: "budget", URLRef: "ops/HOOK", Body: []byte(`{"id":"nlp-monthly/1/2026-03-01"}`),
		Attempts: 2, NextAt: t0.Add(5 * time.Minute), LastError: "503 Service Unavailable", Created: t0}
	delivered := &store.Notification{ID: "nlp-monthly/0/2026-03-01", Kind: "budget", URLRef: "ops/HOOK", Body: []byte(`{}`), NextAt: t0, Created: t0}

	commit(t, s, &store.Batch{Cost: store.Cost{Ledger: []model.LedgerEntry{alloc, idle}, BudgetFired: []model.FiredKey{fired},
		Notifications: []*store.Notification{delivered, pending}}, Meta: map[string]string{store.MeteredToKey: t0.Add(time.Hour).Format(time.RFC3339)}})
	done := *delivered
	done.Delivered, done.Attempts = true, 1
	commit(t, s, &store.Batch{Cost: store.Cost{Ledger: []model.LedgerEntry{owned}, BudgetFired: []model.FiredKey{fired}, Metrics: metrics,
		Notifications: []*store.Notification{&done}}})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	got := load(t, reopen(t, path, Options{}))
	want := store.Cost{Ledger: []model.LedgerEntry{alloc, idle, owned}, BudgetFired: []model.FiredKey{fired}, Metrics: metrics,
		Notifications: []*store.Notification{pending}}
	opts := cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateEmpty()}
	if diff := cmp.Diff(want, got.Cost, opts); diff != "" {
		t.Errorf("cost after reopen (-want +got):\n%s", diff)
	}
	if m := got.Meta[store.MeteredToKey]; m != t0.Add(time.Hour).Format(time.RFC3339) {
		t.Errorf("metered to %q", m)
	}
}
