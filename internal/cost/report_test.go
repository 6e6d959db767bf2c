package cost

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/model"
)

func TestReport(t *testing.T) {
	t.Parallel()
	// One node, $8/h, 8 GPUs: job a (p1, 4 GPUs, telemetry 50%) all hour,
	// job b (p2, 2 GPUs) all hour, 2 GPUs idle; a second empty node at $1/h.
	nodes := []NodeUsage{
		{NodeID: "n1", GPUs: 8, PricePerHour: 8 * model.Dollar, CapacityType: model.Spot, PriceSource: model.PriceCatalog, Allocations: []Allocation{
			{JobID: "a", Attempt: 1, Project: "p1", Tags: map[string]string{"team": "x"}, GPUs: 4, SMActive: 0.5, Telemetry: true},
			{JobID: "b", Attempt: 2, Project: "p2", GPUs: 2}}},
		{NodeID: "n2", GPUs: 1, PricePerHour: model.Dollar, CapacityType: model.OnDemand, PriceSource: model.PriceCatalog},
	}
	r := NewRollup()
	for h := 0; h < 48; h++ {
		r.Add(Meter(nodes, at(time.Duration(h)*time.Hour), at(time.Duration(h+1)*time.Hour)))
	}
	day := 24 * time.Hour
	tests := map[string]struct {
		q    Query
		want []Row
	}{
		"idle shown": {
			q: Query{From: t0, To: at(day), GroupBy: []string{"project"}},
			want: []Row{
				{Start: t0, Group: []string{IdleGroup}, Cost: 24 * 3 * model.Dollar, GPUHours: 24 * 3},
				{Start: t0, Group: []string{"p1"}, Cost: 24 * 4 * model.Dollar, EffectiveCost: 24 * 2 * model.Dollar, MeasuredCost: 24 * 4 * model.Dollar, GPUHours: 24 * 4},
				{Start: t0, Group: []string{"p2"}, Cost: 24 * 2 * model.Dollar, GPUHours: 24 * 2},
			},
		},
		"only the caller's projects, idle dropped": {
			q: Query{From: t0, To: at(day), GroupBy: []string{"project"}, Projects: map[string]bool{"p2": true}},
			want: []Row{
				{Start: t0, Group: []string{"p2"}, Cost: 24 * 2 * model.Dollar, GPUHours: 24 * 2},
			},
		},
		"no visible project shows nothing": {
			q:    Query{From: t0, To: at(day), GroupBy: []string{"project"}, Projects: map[string]bool{}},
			want: []Row{},
		},
		"idle shared by node": {
			q: Query{From: t0, To: at(day), GroupBy: []string{"project"}, Idle: IdleShared},
			want: []Row{
				{Start: t0, Group: []string{IdleGroup}, Cost: 24 * model.Dollar, GPUHours: 24 * 3},
				{Start: t0, Group: []string{"p1"}, Cost: 24 * (4*model.Dollar + 1_333_333), // largest remainder: p2 gets the odd micro-dollar each hour
					EffectiveCost: 24 * 2 * model.Dollar, MeasuredCost: 24 * 4 * model.Dollar, GPUHours: 24 * 4},
				{Start: t0, Group: []string{"p2"}, Cost: 24 * (2*model.Dollar + 666_667), GPUHours: 24 * 2},
			},
		},
		"idle hidden, by tag and capacity, daily step": {
			q: Query{From: t0, To: at(2 * day), Step: day, GroupBy: []string{"tag:team", "capacityType"}, Idle: IdleHidden},
			want: []Row{
				{Start: t0, Group: []string{"", "spot"}, Cost: 24 * 2 * model.Dollar, GPUHours: 48},
				{Start: t0, Group: []string{"x", "spot"}, Cost: 24 * 4 * model.Dollar, EffectiveCost: 48 * model.Dollar, MeasuredCost: 96 * model.Dollar, GPUHours: 96},
				{Start: at(day), Group: []string{"", "spot"}, Cost: 24 * 2 * model.Dollar, GPUHours: 48},
				{Start: at(day), Group: []string{"x", "spot"}, Cost: 24 * 4 * model.Dollar, EffectiveCost: 48 * model.Dollar, MeasuredCost: 96 * model.Dollar, GPUHours: 96},
			},
		},
		"hourly window, scope filter": {
			q: Query{From: at(90 * time.Minute), To: at(3 * time.Hour), Step: time.Hour, Scope: &model.BudgetScope{Project: "p2"}},
			want: []Row{
				{Start: at(time.Hour), Group: []string{}, Cost: 2 * model.Dollar, GPUHours: 2},
				{Start: at(2 * time.Hour), Group: []string{}, Cost: 2 * model.Dollar, GPUHours: 2},
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rep, err := r.Report(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.Rows); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	t.Run("per-job cost across attempts", func(t *testing.T) {
		got, ok := r.Job("b")
		want := JobCost{JobID: "b", Total: 96 * model.Dollar, ByAttempt: map[int]model.Money{2: 96 * model.Dollar}, GPUSeconds: 2 * 48 * 3600, First: t0, Last: at(48 * time.Hour)}
		pts := got.Points
		got.Points = nil
		if diff := cmp.Diff(want, got); diff != "" || !ok {
			t.Errorf("(-want +got)\n%s", diff)
		}
		// The running total after each hour's entry: $2 an hour.
		if len(pts) != 48 {
			t.Fatalf("%d cost points, want one per metered hour (48)", len(pts))
		}
		for i, p := range pts {
			if !p.At.Equal(at(time.Duration(i+1)*time.Hour)) || p.Total != model.Money(2*(i+1))*model.Dollar {
				t.Fatalf("point %d = %+v, want $%d at %v", i, p, 2*(i+1), at(time.Duration(i+1)*time.Hour))
			}
		}
	})
	t.Run("invalid query", func(t *testing.T) {
		_, err := r.Report(Query{From: t0, To: t0, GroupBy: []string{"colour"}, Step: time.Minute})
		want := `from: to: must be after from; groupBy[0]: "colour" is not a field`
		if err == nil || len(err.Error()) < 10 {
			t.Fatalf("error %v, want %q...", err, want)
		}
	})
}

// BenchmarkReport30Days10MRows reads a 30-day report, by project and
// tag, daily, idle shared, from rollups built from 10 million synthetic
// ledger rows (built outside the timer). Target < 2 s.
func BenchmarkReport30Days10MRows(b *testing.B) {
	if testing.Short() {
		b.Skip("builds 10M rows")
	}
	r := NewRollup()
	rnd := rand.New(rand.NewPCG(5, 5))
	const rows = 10_000_000
	const perHour = rows / (30 * 24)
	tags := make([]map[string]string, 40)
	for i := range tags {
		tags[i] = map[string]string{"team": fmt.Sprintf("t%d", i%8), "exp": fmt.Sprintf("e%d", i)}
	}
	caps := []model.CapacityType{model.OnDemand, model.Spot, model.Owned}
	buf := make([]model.LedgerEntry, 0, perHour)
	for h := 0; h < 30*24; h++ {
		buf = buf[:0]
		from := at(time.Duration(h) * time.Hour)
		for len(buf) < perHour {
			node := fmt.Sprint("n", len(buf)/8)
			for k := 0; k < 7; k++ {
				p := rnd.IntN(12)
				buf = append(buf, model.LedgerEntry{Kind: model.LedgerAllocation, NodeID: node, JobID: fmt.Sprint("j", rnd.IntN(50_000)),
					Project: fmt.Sprint("p", p), User: fmt.Sprint("u", rnd.IntN(30)), Queue: fmt.Sprint("q", p%4),
					Tags: tags[rnd.IntN(len(tags))], CapacityType: caps[p%3], PriceSource: model.PriceCatalog, GPUModel: "H100",
					From: from, To: from.Add(time.Hour), Seconds: 3600, GPUSeconds: 3600, Cost: model.Money(rnd.IntN(10_000_000))})
			}
			buf = append(buf, model.LedgerEntry{Kind: model.LedgerIdle, NodeID: node, CapacityType: caps[len(buf)%3], GPUModel: "H100",
				From: from, To: from.Add(time.Hour), Seconds: 3600, GPUSeconds: 3600, Cost: model.Money(rnd.IntN(10_000_000))})
		}
		r.Add(buf)
	}
	q := Query{From: t0, To: at(30 * 24 * time.Hour), Step: 24 * time.Hour, GroupBy: []string{"project", "tag:team"}, Idle: IdleShared}
	hourly := q
	hourly.From = hourly.From.Add(30 * time.Minute)
	b.ResetTimer()
	b.Run("daily", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Report(q); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	})
	b.Run("hourly", func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Report(hourly); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
	})
	b.ReportMetric(float64(r.Rows()), "rows")
}

// TestReportDaysInZone: daily rows are calendar days in the query's zone
// (UTC by default), starting at its midnights, whatever hour the window
// starts at.
func TestReportDaysInZone(t *testing.T) {
	t.Parallel()
	nodes := []NodeUsage{{NodeID: "n", GPUs: 1, PricePerHour: model.Dollar, Allocations: []Allocation{{JobID: "j", Project: "p", GPUs: 1}}}}
	r := NewRollup()
	for h := 0; h < 48; h++ { // $1/h from t0 (midnight UTC) for two days
		r.Add(Meter(nodes, at(time.Duration(h)*time.Hour), at(time.Duration(h+1)*time.Hour)))
	}
	est := time.FixedZone("EST", -5*3600)
	day := 24 * time.Hour
	tests := map[string]struct {
		q    Query
		want []Row
	}{
		"UTC midnights": {
			q: Query{From: at(13 * time.Hour), To: at(2 * day), Step: day, Idle: IdleHidden},
			want: []Row{
				{Start: t0, Group: []string{}, Cost: 24 * model.Dollar, GPUHours: 24},
				{Start: at(day), Group: []string{}, Cost: 24 * model.Dollar, GPUHours: 24},
			},
		},
		"EST midnights (05:00 UTC)": {
			q: Query{From: at(13 * time.Hour), To: at(2 * day), Step: day, Location: est, Idle: IdleHidden},
			want: []Row{
				{Start: time.Date(2025, 3, 1, 0, 0, 0, 0, est), Group: []string{}, Cost: 24 * model.Dollar, GPUHours: 24},
				{Start: time.Date(2025, 3, 2, 0, 0, 0, 0, est), Group: []string{}, Cost: 19 * model.Dollar, GPUHours: 19},
			},
		},
		"two-day steps in EST": {
			q: Query{From: at(13 * time.Hour), To: at(2 * day), Step: 2 * day, Location: est, Idle: IdleHidden},
			want: []Row{
				{Start: time.Date(2025, 3, 1, 0, 0, 0, 0, est), Group: []string{}, Cost: 43 * model.Dollar, GPUHours: 43},
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rep, err := r.Report(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.Rows); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// A job metered for 1,000 hours keeps a bounded running total that still
// ends at its whole cost and never decreases.
func TestJobCostPointsStayBounded(t *testing.T) {
	t.Parallel()
	nodes := []NodeUsage{{NodeID: "n1", GPUs: 1, PricePerHour: model.Dollar, CapacityType: model.OnDemand, PriceSource: model.PriceCatalog,
		Allocations: []Allocation{{JobID: "long", Attempt: 1, Project: "p", GPUs: 1, SMActive: 0.25, Telemetry: true}}}}
	r := NewRollup()
	for h := 0; h < 1000; h++ {
		r.Add(Meter(nodes, at(time.Duration(h)*time.Hour), at(time.Duration(h+1)*time.Hour)))
	}
	jc, ok := r.Job("long")
	if !ok {
		t.Fatal("no cost for the job")
	}
	pts := jc.Points
	if len(pts) > maxJobPoints || len(pts) < maxJobPoints/2 {
		t.Fatalf("%d points, want at most %d and not fewer than half", len(pts), maxJobPoints)
	}
	last := pts[len(pts)-1]
	if last.Total != 1000*model.Dollar || !last.At.Equal(at(1000*time.Hour)) || last.EffectiveCost != 250*model.Dollar {
		t.Errorf("last point = %+v, want $1000 (effective $250) at hour 1000", last)
	}
	for i := 1; i < len(pts); i++ {
		if !pts[i].At.After(pts[i-1].At) || pts[i].Total < pts[i-1].Total {
			t.Fatalf("points %d and %d go back: %+v %+v", i-1, i, pts[i-1], pts[i])
		}
	}
}
