package ledger

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/model"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func entry(job, project string, kind model.LedgerKind, from time.Time, dollars float64) model.LedgerEntry {
	return model.LedgerEntry{Kind: kind, JobID: job, AttemptID: job + "-a", NodeID: "n1", Project: project, Queue: "default",
		CapacityType: model.OnDemand, From: from, To: from.Add(time.Hour), Seconds: 3600, GPUs: 1, GPUSeconds: 3600, Cost: model.FromDollars(dollars)}
}

func TestBookTotalsAndJobs(t *testing.T) {
	t.Parallel()
	b := New([]model.LedgerEntry{entry("j1", "ml", model.LedgerAllocation, t0, 2)})
	b.Add([]model.LedgerEntry{
		entry("j1", "ml", model.LedgerAllocation, t0.Add(time.Hour), 2),
		entry("", "", model.LedgerIdle, t0.Add(time.Hour), 1),
	})
	totals, idle := b.Totals()
	want := map[Key]model.Money{{Project: "ml", Queue: "default", Capacity: string(model.OnDemand)}: model.FromDollars(4)}
	if diff := cmp.Diff(want, totals); diff != "" || idle != model.FromDollars(1) {
		t.Errorf("totals (-want +got):\n%s idle %v", diff, idle)
	}
	jc, ok := b.Job("j1")
	if !ok || jc.Total != model.FromDollars(4) {
		t.Errorf("job j1 cost %+v %v, want $4", jc, ok)
	}
	rep, err := b.Report(cost.Query{From: t0, To: t0.Add(2 * time.Hour), GroupBy: []string{"project"}})
	if err != nil {
		t.Fatal(err)
	}
	var sum model.Money
	for _, r := range rep.Rows {
		if r.Group[0] == "ml" {
			sum += r.Cost
		}
	}
	if sum != model.FromDollars(4) {
		t.Errorf("report of project ml: %v, want $4 (%+v)", sum, rep.Rows)
	}
}

// TestBookConcurrentReaders reads while the meter adds, for the race
// detector.
func TestBookConcurrentReaders(t *testing.T) {
	t.Parallel()
	b := New(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 100 {
			b.Job("j1")
			b.Totals()
			if _, err := b.Report(cost.Query{From: t0, To: t0.Add(100 * time.Hour)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for h := range 100 {
		b.Add([]model.LedgerEntry{entry("j1", "ml", model.LedgerAllocation, t0.Add(time.Duration(h)*time.Hour), 1)})
	}
	wg.Wait()
	if jc, _ := b.Job("j1"); jc.Total != model.FromDollars(100) {
		t.Errorf("j1 cost %v after 100 hours at $1", jc.Total)
	}
}
