package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/gpuseries"
	"github.com/gpufleet/gpufleet/internal/model"
)

// The routes and list options the dashboard's views are built on: one
// request per view (the jobs table asks for its page with the columns it
// shows), and a job page's plots.

func dashboardRoutes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/v1/jobs/{id}/telemetry", Project: projectOfJob, Perm: PermJobsRead, Kinds: usersJobs, Scope: scopeOwnJob,
			Summary:  "Per-GPU telemetry of each attempt over time (SM active, memory used and total in MiB, power in W): bucket means, at most 240 points per GPU over the attempt's life. Kept in memory for live attempts and the last 2,048 ended ones.",
			Response: JobTelemetry{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.jobTelemetry }},
	}
}

// JobTelemetry is GET /v1/jobs/{id}/telemetry's answer.
type JobTelemetry struct {
	Job      string             `json:"job"`
	Attempts []AttemptTelemetry `json:"attempts"`
}

// AttemptTelemetry is one attempt's GPUs.
type AttemptTelemetry struct {
	Number int             `json:"number"`
	GPUs   []gpuseries.GPU `json:"gpus"`
}

func (s *Server) jobTelemetry(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	plots, err := s.cfg.Controller.GPUPlots(id)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	out := JobTelemetry{Job: id, Attempts: []AttemptTelemetry{}}
	for n := 1; len(out.Attempts) < len(plots); n++ {
		if g, ok := plots[n]; ok {
			out.Attempts = append(out.Attempts, AttemptTelemetry{Number: n, GPUs: g})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// JobSummary is what a table row shows of a job besides model.Job: its
// metered cost and its live attempt's efficiency.
type JobSummary struct {
	Cost          model.Money `json:"cost,omitempty"`
	EffectiveCost model.Money `json:"effectiveCost,omitempty"`
	// Measured is set when telemetry measured part of the cost, so the
	// effective cost means something.
	Measured   bool               `json:"measured,omitempty"`
	Efficiency *efficiency.Report `json:"efficiency,omitempty"`
}

// listPage reads GET /v1/jobs's paging and search parameters: offset,
// q (a case-insensitive part of the id, name, user, project or queue)
// and summary=true (each job's cost and efficiency in Summaries).
type listPage struct {
	offset  int
	search  string
	summary bool
}

func readListPage(q map[string][]string, problems *model.FieldErrors) listPage {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	var p listPage
	if v := get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			problems.Add("query.offset", "must be a non-negative integer")
		}
		p.offset = n
	}
	p.search = strings.ToLower(strings.TrimSpace(get("q")))
	switch get("summary") {
	case "", "false":
	case "true":
		p.summary = true
	default:
		problems.Add("query.summary", "must be true or false")
	}
	return p
}

// paged returns the list answer for jobs (every match, newest first)
// cut to the page: the total before paging, the page, and summaries.
func (s *Server) paged(jobs []*model.Job, p listPage, limit int) JobList {
	if p.search != "" {
		kept := jobs[:0:0]
		for _, j := range jobs {
			if matchesSearch(j, p.search) {
				kept = append(kept, j)
			}
		}
		jobs = kept
	}
	out := JobList{Total: len(jobs)}
	if p.offset >= len(jobs) {
		jobs = nil
	} else {
		jobs = jobs[p.offset:]
	}
	if limit > 0 && len(jobs) > limit {
		jobs = jobs[:limit]
	}
	out.Jobs = nonNil(jobs)
	if p.summary {
		out.Summaries = make(map[string]JobSummary, len(jobs))
		for _, j := range jobs {
			var sum JobSummary
			if jc, ok := s.cfg.Controller.JobCost(j.ID); ok {
				sum.Cost, sum.EffectiveCost, sum.Measured = jc.Total, jc.EffectiveCost, jc.MeasuredCost > 0
			}
			if e, ok := s.cfg.Controller.Efficiency(j.ID); ok {
				sum.Efficiency = &e
			}
			out.Summaries[j.ID] = sum
		}
	}
	return out
}

func matchesSearch(j *model.Job, q string) bool {
	for _, f := range []string{j.ID, j.Name, j.User, j.Project, j.Spec.Queue} {
		if strings.Contains(strings.ToLower(f), q) {
			return true
		}
	}
	return false
}
