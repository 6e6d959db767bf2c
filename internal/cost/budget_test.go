package cost

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/model"
)

func day(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

func TestPeriodBounds(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		p          model.BudgetPeriod
		now        time.Time
		start, end time.Time
	}{
		"monthly on the 1st":      {model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}, day(2025, 2, 14, 5), day(2025, 2, 1, 0), day(2025, 3, 1, 0)},
		"monthly before start":    {model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 15}, day(2025, 1, 3, 0), day(2024, 12, 15, 0), day(2025, 1, 15, 0)},
		"monthly on the start":    {model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 15}, day(2025, 1, 15, 0), day(2025, 1, 15, 0), day(2025, 2, 15, 0)},
		"weekly from Monday":      {model.BudgetPeriod{Kind: model.PeriodWeekly, StartDay: 1}, day(2025, 3, 2, 12), day(2025, 2, 24, 0), day(2025, 3, 3, 0)}, // 2 Mar 2025 is a Sunday
		"weekly on the start day": {model.BudgetPeriod{Kind: model.PeriodWeekly, StartDay: 0}, day(2025, 3, 2, 12), day(2025, 3, 2, 0), day(2025, 3, 9, 0)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, e := tt.p.Bounds(tt.now)
			if diff := cmp.Diff([]time.Time{tt.start, tt.end}, []time.Time{s, e}); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestBudgetValidate(t *testing.T) {
	t.Parallel()
	b := model.Budget{Period: model.BudgetPeriod{Kind: "daily"}, Thresholds: []model.BudgetThreshold{{Percent: 0, Action: "email", Basis: "vibes"}}}
	want := `metadata.name: must be set; spec.amount: must be > 0; spec.period.kind: must be "monthly" or "weekly"; ` +
		`spec.scope: must set project, queue or tags; spec.thresholds[0].action: must be one of notify, block-new, stop-spot, stop-all; ` +
		`spec.thresholds[0].basis: must be "actual" or "forecast"; spec.thresholds[0].percent: must be > 0 and at most 10000`
	if diff := cmp.Diff(want, b.Validate().Error()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	b := model.Budget{Name: "nlp", Scope: model.BudgetScope{Tags: map[string]string{"team": "nlp"}}, Amount: 1000 * model.Dollar,
		Period:     model.BudgetPeriod{Kind: model.PeriodWeekly, StartDay: 1},
		Thresholds: []model.BudgetThreshold{{Percent: 80, Action: model.ActionNotify}, {Percent: 90, Action: model.ActionStopSpot, Basis: model.BasisForecast}, {Percent: 100, Action: model.ActionStopAll}}}
	now := day(2025, 3, 5, 10)
	ps := day(2025, 3, 3, 0)
	running := []Running{
		{JobID: "s1", Tags: map[string]string{"team": "nlp"}, CapacityType: model.Spot},
		{JobID: "o1", Tags: map[string]string{"team": "nlp"}, CapacityType: model.OnDemand},
		{JobID: "s2", Tags: map[string]string{"team": "cv"}, CapacityType: model.Spot},
	}
	type out struct {
		Fired  []int
		Blocks int
		Stops  []string
	}
	tests := map[string]struct {
		spend Spend
		fired map[model.FiredKey]bool
		want  out
	}{
		"under":                        {Spend{Actual: 100 * model.Dollar, Forecast: 500 * model.Dollar}, nil, out{}},
		"80% actual":                   {Spend{Actual: 800 * model.Dollar}, nil, out{Fired: []int{0}}},
		"already fired stays quiet":    {Spend{Actual: 850 * model.Dollar}, map[model.FiredKey]bool{{Budget: "nlp", Threshold: 0, PeriodStart: ps}: true}, out{}},
		"forecast stop-spot":           {Spend{Actual: 700 * model.Dollar, Forecast: 950 * model.Dollar}, nil, out{Fired: []int{1}, Stops: []string{"s1"}}},
		"stop-all blocks and stops":    {Spend{Actual: 1000 * model.Dollar, Forecast: 1000 * model.Dollar}, nil, out{Fired: []int{0, 1, 2}, Blocks: 1, Stops: []string{"o1", "s1"}}},
		"last period's firing re-arms": {Spend{Actual: 810 * model.Dollar}, map[model.FiredKey]bool{{Budget: "nlp", Threshold: 0, PeriodStart: ps.AddDate(0, 0, -7)}: true}, out{Fired: []int{0}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ev := Evaluate(EvaluateInput{Budgets: []model.Budget{b}, Spend: map[string]Spend{"nlp": tt.spend}, Fired: tt.fired, Running: running, Now: now})
			var got out
			for _, f := range ev.Firings {
				got.Fired = append(got.Fired, f.Key.Threshold)
			}
			got.Blocks = len(ev.Blocks)
			for _, s := range ev.Stops {
				got.Stops = append(got.Stops, s.JobID)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	hard := model.Budget{Name: "p", Scope: model.BudgetScope{Project: "p"}, Amount: 100 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly}, Hard: true}
	now := day(2025, 3, 10, 0)
	block := Block{Budget: "q", Scope: model.BudgetScope{Queue: "batch"}, Until: day(2025, 4, 1, 0), Reason: "budget q: block-new"}
	tests := map[string]struct {
		r      Request
		spent  model.Money
		blocks []Block
		now    time.Time
		want   Admission
	}{
		"fits": {r: Request{Project: "p", GPUs: 2, PricePerGPUHour: 2 * model.Dollar, MaxDuration: 10 * time.Hour}, spent: 60 * model.Dollar, now: now, want: Admission{OK: true}},
		"worst case exceeds hard": {r: Request{Project: "p", GPUs: 2, PricePerGPUHour: 2*model.Dollar + 4*model.Cent, MaxDuration: 11 * time.Hour}, spent: 60 * model.Dollar, now: now, want: Admission{
			Reason: "budget p (project=p) is hard: worst-case cost $44.88 (2 GPUs × $2.04/GPU-hour × 11h0m0s) on top of $60.00 spent would exceed $100.00 before 2025-04-01"}},
		"no runtime limit in a hard scope": {r: Request{Project: "p", GPUs: 1, PricePerGPUHour: 2 * model.Dollar}, now: now, want: Admission{Field: FieldRuntimeLimit,
			Reason: "budget p (project=p) is hard: a GPU job in its scope must set spec.limits.runtime, which bounds its worst-case cost (GPUs × price × runtime); set it, e.g. limits: {runtime: 12h} or gpufleet run --runtime 12h"}},
		"no runtime limit, no price yet": {r: Request{Project: "p", GPUs: 1}, now: now, want: Admission{Field: FieldRuntimeLimit,
			Reason: "budget p (project=p) is hard: a GPU job in its scope must set spec.limits.runtime, which bounds its worst-case cost (GPUs × price × runtime); set it, e.g. limits: {runtime: 12h} or gpufleet run --runtime 12h"}},
		"no runtime limit outside the scope": {r: Request{Project: "x", GPUs: 1, PricePerGPUHour: 2 * model.Dollar}, now: now, want: Admission{OK: true}},
		"other project":                      {r: Request{Project: "x", GPUs: 2, PricePerGPUHour: 2 * model.Dollar, MaxDuration: 99 * time.Hour}, spent: 60 * model.Dollar, now: now, want: Admission{OK: true}},
		"blocked queue":                      {r: Request{Project: "x", Queue: "batch"}, blocks: []Block{block}, now: now, want: Admission{Reason: "blocked by budget q: block-new"}},
		"block expired":                      {r: Request{Project: "x", Queue: "batch"}, blocks: []Block{block}, now: day(2025, 4, 1, 0), want: Admission{OK: true}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := Admit(tt.r, AdmissionState{Budgets: []model.Budget{hard}, Blocks: tt.blocks, Spend: map[string]Spend{"p": {Actual: tt.spent}}, Now: tt.now})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestMoneyUSD(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		m    model.Money
		want string
	}{
		"zero":             {0, "$0.00"},
		"whole cents":      {172_800_000, "$172.80"},
		"half rounds up":   {5_000, "$0.01"},
		"below half":       {4_999, "$0.00"},
		"negative":         {-1_234_567, "-$1.23"},
		"negative to zero": {-1, "$0.00"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.m.USD()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestForecastSpend(t *testing.T) {
	t.Parallel()
	// $24/day steady spend for 28 days of February: the forecast for March
	// (31 days) at the start of March 11th should be near $24 × 31.
	r := NewRollup()
	nodes := []NodeUsage{{NodeID: "n", GPUs: 1, PricePerHour: model.Dollar, Allocations: []Allocation{{JobID: "j", Project: "p", GPUs: 1}}}}
	from := day(2025, 2, 1, 0)
	now := day(2025, 3, 11, 0)
	for h := from; h.Before(now); h = h.Add(time.Hour) {
		r.Add(Meter(nodes, h, h.Add(time.Hour)))
	}
	b := model.Budget{Name: "p", Scope: model.BudgetScope{Project: "p"}, Amount: 500 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}}
	sp, f := ForecastSpend(r, b, now, 28, 31)
	if sp.Actual != 240*model.Dollar {
		t.Errorf("actual %v, want $240", sp.Actual)
	}
	if sp.Forecast < 740*model.Dollar || sp.Forecast > 748*model.Dollar {
		t.Errorf("forecast %v, want ≈ $744 (%s)", sp.Forecast, f.Method)
	}
	if len(f.Points) != 21+31 {
		t.Errorf("%d points, want 52", len(f.Points))
	}
}

// TestForecastSpendShortHistory: a scope's first days are not padded with
// zeros into a zero forecast. Under a day of spend the forecast is the run
// rate; a few days of spend are their mean, not the mean over 28 days;
// the method used is named, and the interval is not [0, 0].
func TestForecastSpendShortHistory(t *testing.T) {
	t.Parallel()
	nodes := []NodeUsage{{NodeID: "n", GPUs: 1, PricePerHour: 10 * model.Dollar, Allocations: []Allocation{{JobID: "j", Project: "p", GPUs: 1}}}}
	b := model.Budget{Name: "p", Scope: model.BudgetScope{Project: "p"}, Amount: 5000 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1}}
	type got struct {
		Method           string
		Actual, Forecast model.Money
		Wide             bool // the first point's interval is wider than nothing
	}
	tests := map[string]struct {
		from, now time.Time // metered from..now at $10/h
		want      got
	}{
		// $30 in 3 h = $240/day; 21.5 days to April 1st: $5,160 more.
		"first day: the run rate": {from: day(2025, 3, 10, 9), now: day(2025, 3, 10, 12),
			want: got{Method: "run-rate (less than a day of history)", Actual: 30 * model.Dollar, Forecast: 5190 * model.Dollar, Wide: true}},
		// Three whole days at $240/day; 19 days left at their mean.
		"three days: their mean": {from: day(2025, 3, 10, 0), now: day(2025, 3, 13, 0),
			want: got{Method: "mean (short history)", Actual: 720 * model.Dollar, Forecast: (720 + 19*240) * model.Dollar, Wide: true}},
		"nothing spent": {from: day(2025, 3, 10, 0), now: day(2025, 3, 10, 0),
			want: got{Method: "none (no spend yet)"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := NewRollup()
			for h := tt.from; h.Before(tt.now); h = h.Add(time.Hour) {
				r.Add(Meter(nodes, h, h.Add(time.Hour)))
			}
			sp, f := ForecastSpend(r, b, tt.now, 28, 0)
			g := got{Method: f.Method, Actual: sp.Actual, Forecast: sp.Forecast, Wide: len(f.Points) > 0 && f.Points[0].Upper > f.Points[0].Lower}
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
