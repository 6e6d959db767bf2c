package cost

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/model"
)

// simAlloc is one allocation of the simulation, with its project.
type simWorld struct {
	nodes []NodeUsage
	// perGPUSecond is each node's price per GPU-second (micro-dollars),
	// for the independent recomputation; 0 for the odd-priced node.
	perGPUSecond []int64
}

// newSimWorld builds twelve 8-GPU nodes (on-demand, spot, owned) whose
// allocations run in two 4-GPU lanes of back-to-back jobs with random gaps
// and second-granular times, across three projects, over [start, end).
func newSimWorld(seed uint64, start, end time.Time) simWorld {
	r := rand.New(rand.NewPCG(seed, 3))
	var w simWorld
	caps := []model.CapacityType{model.OnDemand, model.Spot, model.Owned}
	srcs := []model.PriceSource{model.PriceCatalog, model.PriceCatalog, model.PriceAmortized}
	for i := 0; i < 12; i++ {
		// $3.60 × k per GPU-hour = 1000 × k micro-dollars per GPU-second,
		// so every split is exact and the recomputation is plain arithmetic.
		k := int64(1 + i%4)
		nu := NodeUsage{NodeID: fmt.Sprintf("n%02d", i), GPUs: 8, CPU: 64, GPUModel: "H100",
			CapacityType: caps[i%3], PriceSource: srcs[i%3], PricePerHour: model.Money(8 * 3600 * 1000 * k)}
		for lane := 0; lane < 2; lane++ {
			t := start.Add(time.Duration(r.IntN(7200)) * time.Second)
			for n := 0; t.Before(end); n++ {
				d := time.Duration(600+r.IntN(3*86400)) * time.Second
				p := fmt.Sprintf("p%d", r.IntN(3))
				nu.Allocations = append(nu.Allocations, Allocation{
					JobID: fmt.Sprintf("%s-l%d-j%d", nu.NodeID, lane, n), AttemptID: "a1", Attempt: 1 + r.IntN(2),
					Project: p, User: "u" + p, Queue: "q", Tags: map[string]string{"team": p + "-team"},
					GPUs: float64(1 + r.IntN(4)), CPU: 4, Start: t, End: t.Add(d)})
				t = t.Add(d + time.Duration(r.IntN(4*3600))*time.Second)
			}
		}
		w.nodes = append(w.nodes, nu)
		w.perGPUSecond = append(w.perGPUSecond, 1000*k)
	}
	// A thirteenth node at an awkward price checks only job + idle = node.
	w.nodes = append(w.nodes, NodeUsage{NodeID: "odd", GPUs: 3, PricePerHour: model.FromDollars(7.777777),
		CapacityType: model.OnDemand, PriceSource: model.PriceCustom, Allocations: []Allocation{
			{JobID: "odd-1", Project: "p0", GPUs: 1, Start: start.Add(17 * time.Hour), End: start.Add(400 * time.Hour)},
			{JobID: "odd-2", Project: "p1", GPUs: 1, Start: start.Add(3 * time.Hour)}}})
	w.perGPUSecond = append(w.perGPUSecond, 0)
	return w
}

// recompute is the independent calculation: for each allocation, overlap
// seconds × GPUs × price per GPU-second.
func (w simWorld) recompute(from, to time.Time) map[string]model.Money {
	out := map[string]model.Money{}
	for i, nu := range w.nodes {
		if w.perGPUSecond[i] == 0 {
			continue
		}
		for _, a := range nu.Allocations {
			s, e := a.Start, a.End
			if s.Before(from) {
				s = from
			}
			if e.After(to) {
				e = to
			}
			if e.After(s) {
				out[a.Project] += model.Money(int64(e.Sub(s)/time.Second) * int64(a.GPUs) * w.perGPUSecond[i])
			}
		}
	}
	return out
}

// TestMonthSimulation drives a fake clock over two months of usage in
// five-minute metering passes, evaluating budgets after every pass.
func TestMonthSimulation(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 2, 0)
	w := newSimWorld(7, start, end)
	roll := NewRollup()

	budgets := []model.Budget{{
		Name: "p0-monthly", Scope: model.BudgetScope{Project: "p0"}, Amount: 0, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
		Thresholds: []model.BudgetThreshold{{Percent: 80, Action: model.ActionNotify}, {Percent: 90, Action: model.ActionStopSpot}, {Percent: 100, Action: model.ActionBlockNew}},
		Hard:       true,
	}}
	// Size the budget so 100% is reached mid-month: 70% of April's spend.
	budgets[0].Amount = w.recompute(start, start.AddDate(0, 1, 0))["p0"] * 7 / 10
	if err := budgets[0].Validate(); err != nil {
		t.Fatal(err)
	}

	fired := map[model.FiredKey]bool{}
	firingsPerPeriod := map[string]map[int]int{}
	var spend model.Money
	var periodStart time.Time
	var stopSpotSeen []string
	blockedAt, readmittedAt := time.Time{}, time.Time{}
	req := Request{JobID: "new", Project: "p0", GPUs: 1, PricePerGPUHour: model.Dollar, MaxDuration: time.Hour}
	nodeTotals := map[string]model.Money{}
	var buf []model.LedgerEntry

	for now := start; now.Before(end); now = now.Add(5 * time.Minute) {
		next := now.Add(5 * time.Minute)
		buf = AppendMeter(buf[:0], w.nodes, now, next)
		roll.Add(buf)
		ps, _ := budgets[0].Period.Bounds(next)
		if !ps.Equal(periodStart) {
			periodStart, spend = ps, 0
		}
		for _, e := range buf {
			nodeTotals[e.NodeID] += e.Cost
			if e.Kind == model.LedgerAllocation && budgets[0].Scope.Matches(e.Project, e.Queue, e.Tags) {
				spend += e.Cost
			}
		}
		var running []Running
		for _, nu := range w.nodes {
			for _, a := range nu.Allocations {
				if !a.Start.After(next) && a.End.After(next) {
					running = append(running, Running{JobID: a.JobID, Project: a.Project, Queue: a.Queue, Tags: a.Tags, CapacityType: nu.CapacityType})
				}
			}
		}
		sp := map[string]Spend{"p0-monthly": {Actual: spend}}
		ev := Evaluate(EvaluateInput{Budgets: budgets, Spend: sp, Fired: fired, Running: running, Now: next})
		for _, f := range ev.Firings {
			fired[f.Key] = true
			per := f.Key.PeriodStart.Format("2006-01")
			if firingsPerPeriod[per] == nil {
				firingsPerPeriod[per] = map[int]int{}
			}
			firingsPerPeriod[per][f.Key.Threshold]++
			if f.Action == model.ActionStopSpot {
				for _, s := range ev.Stops {
					stopSpotSeen = append(stopSpotSeen, s.JobID)
				}
			}
		}
		ad := Admit(req, AdmissionState{Budgets: budgets, Blocks: ev.Blocks, Spend: sp, Now: next})
		ok, reason := ad.OK, ad.Reason
		if !ok && blockedAt.IsZero() {
			blockedAt = next
			if reason == "" {
				t.Error("refusal without a reason")
			}
		}
		if ok && !blockedAt.IsZero() && readmittedAt.IsZero() {
			readmittedAt = next
		}
	}

	t.Run("per-project totals equal the recomputation", func(t *testing.T) {
		for _, month := range []time.Time{start, start.AddDate(0, 1, 0)} {
			want := w.recompute(month, month.AddDate(0, 1, 0))
			// The odd-priced node is the only "custom" one; leave it out.
			rep, err := roll.Report(Query{From: month, To: month.AddDate(0, 1, 0), GroupBy: []string{"project", "priceSource"}, Idle: IdleHidden})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]model.Money{}
			for _, row := range rep.Rows {
				if row.Group[1] != string(model.PriceCustom) {
					got[row.Group[0]] += row.Cost
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s (-recomputed +reported)\n%s", month.Format("2006-01"), diff)
			}
		}
	})
	t.Run("job plus idle equals node cost", func(t *testing.T) {
		want := map[string]model.Money{}
		for _, nu := range w.nodes {
			want[nu.NodeID] = NodeCost(nu.PricePerHour, start, end)
		}
		if diff := cmp.Diff(want, nodeTotals); diff != "" {
			t.Errorf("(-node cost +sum of entries)\n%s", diff)
		}
		var all model.Money
		for _, m := range want {
			all += m
		}
		for _, mode := range []IdleMode{IdleShown, IdleShared} {
			rep, err := roll.Report(Query{From: start, To: end, Step: 24 * time.Hour, GroupBy: []string{"tag:team", "capacityType"}, Idle: mode})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Total != all {
				t.Errorf("%s: report total %v, node cost %v", mode, rep.Total, all)
			}
		}
	})
	t.Run("each threshold fires exactly once per period", func(t *testing.T) {
		want := map[string]map[int]int{"2025-04": {0: 1, 1: 1, 2: 1}, "2025-05": {0: 1, 1: 1, 2: 1}}
		if diff := cmp.Diff(want, firingsPerPeriod); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
	t.Run("block-new refuses, then re-admits in the next period", func(t *testing.T) {
		if blockedAt.IsZero() || blockedAt.Month() != time.April {
			t.Fatalf("blocked at %v, want in April", blockedAt)
		}
		if !readmittedAt.Equal(time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("re-admitted at %v, want the period roll-over", readmittedAt)
		}
	})
	t.Run("stop-spot lists only spot jobs", func(t *testing.T) {
		if len(stopSpotSeen) == 0 {
			t.Fatal("no spot jobs listed")
		}
		spotNodes := map[string]bool{}
		for _, nu := range w.nodes {
			spotNodes[nu.NodeID] = nu.CapacityType == model.Spot
		}
		for _, id := range stopSpotSeen {
			if !spotNodes[id[:3]] {
				t.Errorf("%s is not on a spot node", id)
			}
		}
	})
}
