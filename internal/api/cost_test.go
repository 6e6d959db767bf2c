package api_test

import (
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

const budgetDoc = `{"apiVersion": "gpufleet.dev/v1", "kind": "Budget", "metadata": {"name": "all-monthly"},
  "spec": {"scope": {"queue": "default"}, "amount": "1000", "period": {"kind": "monthly", "startDay": 1},
    "thresholds": [{"percent": 80, "action": "notify"}, {"percent": 100, "action": "block-new"}]}}`

// runMetered runs one job on a one-GPU node until the ledger holds a
// metered second of it, and returns its id.
func runMetered(t *testing.T, e *testEnv) string {
	t.Helper()
	id := e.submit(t, jobManifest("metered"))
	agent := e.registerNode(t, 1)
	rs := agent.waitReplicas(t, 1)
	agent.report(t, runningStatus(rs[0].ID))
	e.waitJob(t, id, model.JobRunning)
	// Ledger times are whole seconds: pass until one has gone by.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := e.ctrl.CostPass(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.ctrl.JobCost(id); ok {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s was never metered", id)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the wall clock's next second; bounded
	}
}

func TestCostReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	runMetered(t, e)
	get := func(path string) reply { return e.do(t, req{Method: "GET", Path: path, Token: e.admin}) }

	t.Run("json", func(t *testing.T) {
		rep := decodeReply[api.CostReport](t, get("/v1/cost?window=1d&by=kind,project,queue,priceSource&idle=shown"), http.StatusOK)
		if diff := cmp.Diff([]string{"kind", "project", "queue", "priceSource"}, rep.GroupBy); diff != "" {
			t.Errorf("groupBy (-want +got):\n%s", diff)
		}
		var kinds []string
		for _, r := range rep.Rows {
			kinds = append(kinds, r.Group["kind"])
			if r.Group["kind"] == "allocation" {
				want := map[string]string{"kind": "allocation", "project": "default", "queue": "default", "priceSource": string(model.PriceOwnedUnpriced)}
				if diff := cmp.Diff(want, r.Group); diff != "" {
					t.Errorf("allocation row (-want +got):\n%s", diff)
				}
				if r.GPUHours <= 0 {
					t.Errorf("allocation row has %v GPU-hours", r.GPUHours)
				}
			}
		}
		if !strings.Contains(strings.Join(kinds, ","), "allocation") {
			t.Errorf("rows %v have no allocation", kinds)
		}
	})
	t.Run("csv", func(t *testing.T) {
		r := get("/v1/cost?window=1d&by=project,queue&idle=hidden&format=csv")
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv") {
			t.Fatalf("status %d, Content-Type %q: %s", r.Status, r.Header.Get("Content-Type"), r.Body)
		}
		recs, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"start", "project", "queue", "cost", "effective_cost", "measured_cost", "gpu_hours"}, recs[0]); diff != "" {
			t.Errorf("header (-want +got):\n%s", diff)
		}
		if len(recs) != 2 || recs[1][1] != "default" || recs[1][2] != "default" || recs[1][3] != "0.000000" {
			t.Errorf("rows = %q, want one default/default row at $0 (owned, unpriced)", recs[1:])
		}
	})
	t.Run("invalid", func(t *testing.T) {
		r := get("/v1/cost?window=soon&format=xml")
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "window") || !strings.Contains(string(r.Body), "format") {
			t.Errorf("status %d: %s, want 400 naming window and format", r.Status, r.Body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		x := e.scrape(t, e.admin)
		tests := map[string]struct {
			family, typ string
			labels      map[string]string
		}{
			"job cost":  {"gpufleet_cost_dollars_total", "counter", map[string]string{"project": "default", "queue": "default", "capacity_type": "owned"}},
			"idle cost": {"gpufleet_idle_cost_dollars_total", "counter", map[string]string{}},
		}
		for name, tc := range tests {
			if got := x.types[tc.family]; got != tc.typ {
				t.Errorf("%s: %s has type %q, want %q", name, tc.family, got, tc.typ)
			}
			if _, ok := x.value(tc.family, tc.labels); !ok {
				t.Errorf("%s: no %s%v in /metrics", name, tc.family, tc.labels)
			}
		}
	})
}

func TestBudgetStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	post := func(path string, body []byte) reply {
		return e.do(t, req{Method: "POST", Path: path, Token: e.admin, Body: body})
	}
	decodeReply[api.ApplyView](t, post("/v1/apply", fleetBody(t, "budget", budgetDoc)), http.StatusCreated)
	runMetered(t, e)
	get := func(path string) reply { return e.do(t, req{Method: "GET", Path: path, Token: e.admin}) }

	list := decodeReply[api.BudgetList](t, get("/v1/budgets"), http.StatusOK)
	if len(list.Budgets) != 1 {
		t.Fatalf("budgets = %+v, want one", list.Budgets)
	}
	b := list.Budgets[0]
	now := time.Now().UTC()
	wantStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if b.Budget.Name != "all-monthly" || !b.PeriodStart.Equal(wantStart) || !b.PeriodEnd.Equal(wantStart.AddDate(0, 1, 0)) {
		t.Errorf("budget %s period %s…%s, want all-monthly from %s", b.Budget.Name, b.PeriodStart, b.PeriodEnd, wantStart)
	}
	if b.Actual != 0 || b.Ratio != 0 || len(b.Fired) != 0 || b.Blocked {
		t.Errorf("budget = actual %s ratio %v fired %v blocked %v, want nothing spent on owned GPUs", b.Actual, b.Ratio, b.Fired, b.Blocked)
	}
	one := decodeReply[model.BudgetStatus](t, get("/v1/budgets/all-monthly"), http.StatusOK)
	if len(one.Daily) == 0 {
		t.Errorf("GET /v1/budgets/all-monthly has no daily forecast")
	}
	if r := get("/v1/budgets/nope"); r.Status != http.StatusNotFound {
		t.Errorf("unknown budget: %d %s", r.Status, r.Body)
	}
	fc := decodeReply[api.BudgetList](t, get("/v1/cost/forecast?days=3"), http.StatusOK)
	if len(fc.Budgets) != 1 || len(fc.Budgets[0].Daily) == 0 {
		t.Errorf("forecast = %+v, want one budget with daily points", fc.Budgets)
	}
	x := e.scrape(t, e.admin)
	if v, ok := x.value("gpufleet_budget_spend_ratio", map[string]string{"budget": "all-monthly"}); !ok || v != 0 {
		t.Errorf("gpufleet_budget_spend_ratio{budget=all-monthly} = %v, %v; want 0", v, ok)
	}
}
