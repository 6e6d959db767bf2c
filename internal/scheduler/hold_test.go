package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

func spotAllowed(j *model.Job) { j.Spec.Spot = model.SpotAllowed }

// TestBudgetHolds: the budgets' holds are a scheduler input
// (Snapshot.Holds): a held job is not placed and its verdict is the hold's
// reason, without a queue position; a spot-only hold spares jobs that
// never run on spot; an expired hold holds nothing.
func TestBudgetHolds(t *testing.T) {
	w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
	w.submit(
		job("blocked", 1, 1, inProject("nlp")),
		job("spot", 2, 1, inProject("vision"), spotAllowed),
		job("on-demand", 3, 1, inProject("vision")),
		job("expired", 4, 1, inProject("old")),
	)
	snap := w.st.Snapshot()
	snap.Holds = []state.Hold{
		{Scope: model.BudgetScope{Project: "nlp"}, Until: now.Add(time.Hour), Reason: "budget b1: block-new"},
		{Scope: model.BudgetScope{Project: "vision"}, Until: now.Add(time.Hour), Reason: "budget b2: stop-spot", SpotOnly: true},
		{Scope: model.BudgetScope{Project: "old"}, Until: now, Reason: "budget b3: last period"},
	}
	pending := len(snap.Pending)
	plan := Schedule(snap, nil, now, 1)
	if diff := cmp.Diff([]string{"on-demand", "expired"}, boundIDs(plan)); diff != "" {
		t.Errorf("bound (-want +got):\n%s", diff)
	}
	want := map[string]Verdict{
		"blocked": {Queue: model.DefaultQueue, Reasons: []Reason{{Scope: "job", Message: "held by budget b1: block-new"}}},
		"spot":    {Queue: model.DefaultQueue, Reasons: []Reason{{Scope: "job", Message: "held by budget b2: stop-spot (the job may run on spot)"}}},
	}
	if diff := cmp.Diff(want, plan.Verdicts.Map()); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
	if len(snap.Pending) != pending {
		t.Errorf("Schedule changed the snapshot's pending jobs: %d, was %d", len(snap.Pending), pending)
	}
}
