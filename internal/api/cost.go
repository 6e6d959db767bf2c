package api

import (
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // ?tz= names IANA zones on hosts without a zoneinfo database

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/cost/purchase"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// PermCostRead lets a user read budgets, forecasts and the purchase mix,
// which span every project.
const PermCostRead Permission = "cost.read"

// PermCostReport lets a user read the cost report, filtered to the projects
// the caller may read.
const PermCostReport Permission = "cost.report"

// PermJobsMetrics lets a job report its own training metrics.
const PermJobsMetrics Permission = "jobs.metrics"

func costRoutes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/v1/cost", Perm: PermCostReport, Kinds: users,
			Summary: "Cost report from the ledger's rollups: a window, grouped by fields or tags, in steps, idle shown, shared by node or hidden.",
			Query: []Param{{"window", "string", "e.g. 30d, 12h (default 30d), ending now"}, {"by", "string", "comma-separated: kind, project, user, queue, capacityType, priceSource, gpuModel, provider, region, pool, tag:KEY"},
				{"step", "string", "row length, whole hours (e.g. 1d, 6h); default one row. Whole days are calendar days from midnight in tz"},
				{"tz", "string", "IANA time zone of day steps, e.g. Europe/Berlin (default UTC)"}, {"idle", "string", "shown | shared | hidden (default shown)"},
				{"format", "string", "json (default) or csv"}},
			Response: CostReport{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.costReport }},
		{Method: "GET", Pattern: "/v1/cost/forecast", Perm: PermCostRead, Kinds: users,
			Summary:  "Each budget's daily spend forecast to the end of its period, with a 95% prediction interval and the model used (Holt-Winters with weekly seasonality; the mean under 14 days of history; the run rate on a scope's first day).",
			Query:    []Param{{"days", "integer", "at most this many days from today (default or 0: to the period's end); a forecast never passes its period's end"}},
			Response: BudgetList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.costForecast }},
		{Method: "GET", Pattern: "/v1/cost/purchase", Perm: PermCostRead, Kinds: users,
			Summary:  "Commitment level per GPU model from hourly usage over a 7, 30 or 60-day lookback (the discount-quantile of hourly usage).",
			Query:    []Param{{"lookback", "integer", "7, 30 or 60 (default 30)"}, {"months", "integer", "commitment term, 12 or 36 (default 12)"}, {"cloud", "string", "aws, gcp or azure, for the default discount (default aws)"}, {"discount", "number", "negotiated discount, 0–1, overrides the default"}},
			Response: PurchaseList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.costPurchase }},
		{Method: "GET", Pattern: "/v1/budgets", Perm: PermCostRead, Kinds: users, Summary: "Budgets with their spend, forecast and fired thresholds this period.",
			Response: BudgetList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listBudgets }},
		{Method: "GET", Pattern: "/v1/budgets/{name}", Perm: PermCostRead, Kinds: users, Summary: "One budget with its daily forecast.",
			Response: model.BudgetStatus{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getBudget }},
		{Method: "POST", Pattern: "/v1/jobs/{id}/metrics", Project: projectOfJob, Perm: PermJobsMetrics, Kinds: usersJobs, Scope: scopeOwnJob,
			Summary: "Report a training step's metrics (a job's own token may); the job's early-stop policy decides on them.",
			Request: MetricReport{}, Response: MetricVerdict{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.reportMetrics }},
	}
}

// JobCostView is a job's cost across attempts, in dollars as strings.
type JobCostView struct {
	Total         model.Money         `json:"total"`
	ByAttempt     map[int]model.Money `json:"byAttempt"`
	EffectiveCost model.Money         `json:"effectiveCost,omitempty"`
	MeasuredCost  model.Money         `json:"measuredCost,omitempty"`
	GPUHours      float64             `json:"gpuHours"`
	// Points is the running total over time (at most 128, thinned).
	Points []cost.JobCostPoint `json:"points,omitempty"`
}

func jobCostView(jc cost.JobCost) *JobCostView {
	return &JobCostView{Total: jc.Total, ByAttempt: jc.ByAttempt, EffectiveCost: jc.EffectiveCost, MeasuredCost: jc.MeasuredCost, GPUHours: jc.GPUSeconds / 3600, Points: jc.Points}
}

// CostReport is GET /v1/cost's answer.
type CostReport struct {
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	GroupBy []string      `json:"groupBy"`
	Idle    string        `json:"idle"`
	Rows    []CostRowView `json:"rows"`
	Total   model.Money   `json:"total"`
}

// CostRowView is one group in one step.
type CostRowView struct {
	Start         time.Time         `json:"start"`
	Group         map[string]string `json:"group"`
	Cost          model.Money       `json:"cost"`
	EffectiveCost model.Money       `json:"effectiveCost"`
	MeasuredCost  model.Money       `json:"measuredCost"`
	GPUHours      float64           `json:"gpuHours"`
}

// BudgetList lists budgets.
type BudgetList struct {
	Budgets []model.BudgetStatus `json:"budgets"`
}

// PurchaseList is one recommendation per GPU model.
type PurchaseList struct {
	LookbackDays    int                       `json:"lookbackDays"`
	Recommendations []purchase.Recommendation `json:"recommendations"`
}

// MetricReport is what a job reports: a step and named values.
type MetricReport struct {
	Step   int64              `json:"step"`
	Values map[string]float64 `json:"values"`
}

// MetricVerdict is the early-stop policy's answer to a report.
type MetricVerdict struct {
	Triggered bool   `json:"triggered"`
	Stop      bool   `json:"stop"`
	Reason    string `json:"reason,omitempty"`
}

// parseSpan reads "30d", "12h" or a Go duration.
func parseSpan(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30d or 12h", s)
	}
	return d, nil
}

func (s *Server) costReport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var fe model.FieldErrors
	window := 30 * 24 * time.Hour
	if v := q.Get("window"); v != "" {
		d, err := parseSpan(v)
		if err != nil {
			fe.Add("window", err.Error())
		}
		window = d
	}
	var step time.Duration
	if v := q.Get("step"); v != "" {
		d, err := parseSpan(v)
		if err != nil {
			fe.Add("step", err.Error())
		}
		step = d
	}
	loc := time.UTC
	if v := q.Get("tz"); v != "" {
		l, err := time.LoadLocation(v)
		if err != nil {
			fe.Add("tz", fmt.Sprintf("%q is not a time zone: use an IANA name such as UTC, Europe/Berlin or America/New_York", v))
		}
		if l != nil {
			loc = l
		}
	}
	var by []string
	if v := q.Get("by"); v != "" {
		by = strings.Split(v, ",")
	}
	idle := cost.IdleMode(q.Get("idle"))
	if idle == "" {
		idle = cost.IdleShown
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "csv" {
		fe.Add("format", `must be "json" or "csv"`)
	}
	if len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the cost query is invalid", fe)
		return
	}
	to := time.Now().UTC()
	if step >= 24*time.Hour || window%(24*time.Hour) == 0 {
		to = to.Truncate(time.Hour).Add(time.Hour) // the current hour, in full
	}
	cq := cost.Query{From: to.Add(-window), To: to, Step: step, Location: loc, GroupBy: by, Idle: idle,
		Projects: s.visibleProjects(r, MinRole[PermCostReport])} // nil for global admins: everything
	rep, err := s.cfg.Controller.CostReport(cq)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	out := CostReport{From: rep.Query.From, To: cq.To, GroupBy: nonNil(by), Idle: string(idle), Rows: []CostRowView{}, Total: rep.Total}
	for _, row := range rep.Rows {
		g := map[string]string{}
		for i, f := range by {
			g[f] = row.Group[i]
		}
		out.Rows = append(out.Rows, CostRowView{Start: row.Start, Group: g, Cost: row.Cost, EffectiveCost: row.EffectiveCost, MeasuredCost: row.MeasuredCost, GPUHours: row.GPUHours})
	}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv")
		cw := csv.NewWriter(w)
		_ = cw.Write(append(append([]string{"start"}, by...), "cost", "effective_cost", "measured_cost", "gpu_hours"))
		for i, row := range rep.Rows {
			rec := append([]string{row.Start.In(loc).Format(time.RFC3339)}, rep.Rows[i].Group...)
			rec = append(rec, row.Cost.String()[1:], row.EffectiveCost.String()[1:], row.MeasuredCost.String()[1:], strconv.FormatFloat(row.GPUHours, 'f', 3, 64))
			_ = cw.Write(rec)
		}
		cw.Flush()
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listBudgets(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, BudgetList{Budgets: nonNil(s.cfg.Controller.Budgets(0))})
}

func (s *Server) costForecast(w http.ResponseWriter, r *http.Request) {
	days := 366 // to the period's end
	if v := r.URL.Query().Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 366 {
			writeProblem(w, r, http.StatusBadRequest, "the forecast query is invalid", model.FieldErrors{{Path: "days", Message: "must be 0–366 (0: to the period's end)"}})
			return
		}
		if n > 0 {
			days = n
		}
	}
	writeJSON(w, http.StatusOK, BudgetList{Budgets: nonNil(s.cfg.Controller.Budgets(days))})
}

func (s *Server) getBudget(w http.ResponseWriter, r *http.Request) {
	b, err := s.cfg.Controller.Budget(r.PathValue("name"), 366) // to the period's end
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) costPurchase(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var fe model.FieldErrors
	lookback, months := 30, 12
	if v := q.Get("lookback"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n != 7 && n != 30 && n != 60 {
			fe.Add("lookback", "must be 7, 30 or 60")
		}
		lookback = n
	}
	if v := q.Get("months"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n != 12 && n != 36 {
			fe.Add("months", "must be 12 or 36")
		}
		months = n
	}
	cloud := q.Get("cloud")
	if cloud == "" {
		cloud = "aws"
	}
	disc, ok := purchase.Discount(purchase.DefaultDiscounts, cloud, months)
	if v := q.Get("discount"); v != "" {
		d, err := strconv.ParseFloat(v, 64)
		if err != nil || !(d > 0 && d < 1) {
			fe.Add("discount", "must be between 0 and 1")
		}
		disc, ok = d, true
	}
	if !ok {
		fe.Add("cloud", "has no default discount; give discount")
	}
	if len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the purchase query is invalid", fe)
		return
	}
	usage, spot := s.cfg.Controller.HourlyGPUUsage(lookback)
	out := PurchaseList{LookbackDays: lookback, Recommendations: []purchase.Recommendation{}}
	for _, m := range slices.Sorted(maps.Keys(usage)) {
		od := s.onDemandPerGPUHour(r.Context(), m)
		rec, err := purchase.Recommend(purchase.Input{GPUModel: m, Usage: usage[m], Interruptible: spot[m], OnDemand: od,
			Term: purchase.Term{Months: months, Discount: disc}, SpotPrice: od * 0.4, SpotOverhead: 0.1})
		if err != nil {
			rec = purchase.Recommendation{GPUModel: m, Reason: err.Error()}
		}
		if math.IsInf(rec.BreakEvenMonths, 0) {
			rec.BreakEvenMonths = -1 // JSON has no infinity: never pays
		}
		out.Recommendations = append(out.Recommendations, rec)
	}
	writeJSON(w, http.StatusOK, out)
}

// onDemandPerGPUHour is the cheapest on-demand catalog price per GPU-hour
// for a model; 0 when the catalog has none.
func (s *Server) onDemandPerGPUHour(ctx context.Context, gpu string) float64 {
	best := 0.0
	for _, o := range s.cfg.Controller.CatalogOffers(ctx) {
		if o.GPU != gpu || o.CapacityType != model.OnDemand || o.GPUCount == 0 {
			continue
		}
		if p := o.PricePerHour / float64(o.GPUCount); best == 0 || p < best {
			best = p
		}
	}
	return best
}

func (s *Server) reportMetrics(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var rep MetricReport
	if problems := manifest.DecodeJSON(body, &rep); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the metric report is invalid", problems)
		return
	}
	if len(rep.Values) == 0 {
		writeProblem(w, r, http.StatusBadRequest, "the metric report is invalid", model.FieldErrors{{Path: "values", Message: "must name at least one value"}})
		return
	}
	v, err := s.cfg.Controller.ReportMetrics(r.Context(), r.PathValue("id"), rep.Step, rep.Values)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, MetricVerdict{Triggered: v.Triggered, Stop: v.Stop, Reason: v.Reason})
}
