package budgets

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

var now = time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)

var ml = model.Budget{Name: "ml", Scope: model.BudgetScope{Project: "ml"}, Amount: model.FromDollars(100),
	Period: model.BudgetPeriod{Kind: model.PeriodMonthly},
	Thresholds: []model.BudgetThreshold{
		{Percent: 50, Action: model.ActionNotify},
		{Percent: 80, Action: model.ActionStopSpot},
		{Percent: 100, Action: model.ActionBlockNew},
	}}

func TestRecordDerivesTheHolds(t *testing.T) {
	t.Parallel()
	start, end := ml.Period.Bounds(now)
	lastMonth := model.FiredKey{Budget: "ml", Threshold: 1, PeriodStart: start.AddDate(0, -1, 0)}
	s := New([]model.FiredKey{lastMonth})
	s.Record([]model.Budget{ml}, nil, nil, nil, now)
	if h := s.Holds(); len(h) != 0 {
		t.Fatalf("last month's stop-spot holds this month: %+v", h)
	}
	block := cost.Block{Budget: "ml", Scope: ml.Scope, Until: end, Reason: "budget ml: block-new"}
	spend := map[string]cost.Spend{"ml": {Actual: model.FromDollars(101)}}
	s.Record([]model.Budget{ml},
		[]model.FiredKey{{Budget: "ml", Threshold: 1, PeriodStart: start}, {Budget: "ml", Threshold: 2, PeriodStart: start}},
		[]cost.Block{block}, spend, now)
	got := s.Holds()
	want := []state.Hold{
		{Scope: ml.Scope, Until: end, Reason: "budget ml: block-new"},
		{Scope: ml.Scope, Until: end, SpotOnly: true,
			Reason: "budget ml (project=ml): stop-spot fired at 80% this period; held until " + end.Format(time.DateOnly)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
	fired, blocked := s.Status(ml, start, now)
	if diff := cmp.Diff([]int{1, 2}, fired); diff != "" || !blocked {
		t.Errorf("status: fired (-want +got):\n%s blocked %v", diff, blocked)
	}
	if sp := s.Spend("ml"); sp.Actual != model.FromDollars(101) {
		t.Errorf("spend %v", sp.Actual)
	}
	if s.Len() != 3 {
		t.Errorf("%d fired keys, want 3 (one from last month)", s.Len())
	}
	// No budgets declared any more: the period's state goes, fired keys stay.
	s.Record(nil, nil, nil, nil, now)
	if blocks, _ := s.Admission(); len(blocks) != 0 || len(s.Holds()) != 0 || s.Len() != 3 {
		t.Errorf("after the budgets went: %d blocks, %d holds, %d fired", len(blocks), len(s.Holds()), s.Len())
	}
}

func TestFiredIsACopy(t *testing.T) {
	t.Parallel()
	s := New(nil)
	f := s.Fired()
	f[model.FiredKey{Budget: "x"}] = true
	if s.Len() != 0 {
		t.Error("changing Fired's map changed the state")
	}
}

// TestReadersDuringPasses reads views while passes record, for the race
// detector.
func TestReadersDuringPasses(t *testing.T) {
	t.Parallel()
	s := New(nil)
	start, end := ml.Period.Bounds(now)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			s.Holds()
			s.Status(ml, start, now)
			s.Admission()
			s.Fired()
		}
	}()
	for i := range 200 {
		s.Record([]model.Budget{ml}, []model.FiredKey{{Budget: "ml", Threshold: i % 3, PeriodStart: start}},
			[]cost.Block{{Budget: "ml", Until: end}}, map[string]cost.Spend{"ml": {}}, now)
	}
	wg.Wait()
}
