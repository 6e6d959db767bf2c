package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// apiRequests lists the API paths the page fetched since the last call
// (the browser's resource timing entries), and clears them.
func apiRequests(t *testing.T, ctx context.Context) []string {
	t.Helper()
	paths, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const out = performance.getEntriesByType("resource").map((e) => new URL(e.name).pathname + new URL(e.name).search).filter((p) => p.startsWith("/v1/"));
		performance.clearResourceTimings();
		performance.setResourceTimingBufferSize(100000);
		return out;
	})()`))
	if err != nil {
		t.Fatalf("reading the page's requests: %v", err)
	}
	return paths
}

func matching(paths []string, re *regexp.Regexp) []string {
	var out []string
	for _, p := range paths {
		if re.MatchString(p) {
			out = append(out, p)
		}
	}
	return out
}

// axesScript counts, for the charts inside sel, the ticks with a label on
// each axis, and the legend entries; it fails (false) while any chart
// lacks two of each tick.
func axesScript(sel string) string {
	return fmt.Sprintf(`(() => {
		const figs = [...document.querySelectorAll(%q + " figure.chart-figure")];
		if (figs.length === 0) return false;
		const out = figs.map((f) => ({
			title: f.querySelector("figcaption").textContent,
			x: [...f.querySelectorAll("svg .x-axis .tick text")].map((e) => e.textContent),
			y: [...f.querySelectorAll("svg .y-axis .tick text")].map((e) => e.textContent),
			unit: (f.querySelector("svg .y-axis text.unit") || {}).textContent || "",
			legend: [...f.querySelectorAll(".legend li")].map((e) => e.textContent),
			lines: f.querySelectorAll("svg path.series, svg rect.bar").length,
		}));
		return out.every((c) => c.x.length >= 2 && c.y.length >= 2 && c.unit && c.legend.length >= 1 && c.lines >= 1) ? JSON.stringify(out) : false;
	})()`, sel)
}

type chartInfo struct {
	Title  string   `json:"title"`
	X      []string `json:"x"`
	Y      []string `json:"y"`
	Unit   string   `json:"unit"`
	Legend []string `json:"legend"`
	Lines  int      `json:"lines"`
}

// The dashboard as a tenant and as an admin, in headless Chromium against
// the real binary: a member of project vision sees only vision in the
// submit form's project picker, submits there, follows the link to the
// job's page and sees its log lines, GPU plots with time and value axes
// and legends, and the cost over time; the fleet page refreshes with one
// jobs request per refresh (no request per job) and never asks for
// budgets, so the audit log has no refusal of the tenant; the admin's
// GPU tile shows the job but the tenant sees another project's GPU only
// as "in use". The admin submits to a project picked in the form.
func TestDashboardJobPageAsTenantAndAdmin(t *testing.T) {
	s, adminTok := dashboardServer(t)
	var bob api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", "bob", "--ttl", "1h", "-o", "json")), &bob); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("roles", "grant", "bob", "vision", "member")
	// Another tenant's job holds a GPU meanwhile (project default).
	other := strings.TrimSpace(s.gpufleet("run", "--gpus", "1", "--name", "someone-else", "--", "sh", "-c", "sleep 60"))
	s.waitJob(other, func(v api.JobView) bool { return v.State == model.JobRunning }, "started")
	t.Cleanup(func() { _, _ = s.gpufleetErr("jobs", "cancel", other) })

	base := "http://" + s.listen
	type C = chromedp.CSS
	ctx := browser(t, 150*time.Second)
	err := chromedp.Do(ctx,
		login(base+"/ui/", bob.Secret),
		chromedp.WaitVisible(C("#job-command")),
		chromedp.WaitReady(C(`#job-project option[value="vision"]`)), // options have no box: ready, not visible
	)
	if err != nil {
		t.Fatalf("logging in as bob: %v\nserver log:\n%s", err, s.out)
	}
	picker, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#job-project option")].map((o) => o.value)`))
	if err != nil || strings.Join(picker, ",") != "vision" {
		t.Fatalf("bob's project picker = %v (%v), want only vision", picker, err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(C("#job-name"), "bobs-job"),
		chromedp.SendKeys(C("#job-command"), "echo first log line; echo second log line; sleep 12; echo last log line"),
		chromedp.Click(C("#submit-job")),
		chromedp.WaitVisible(C("#submit-result[data-job]")),
	)
	if err != nil {
		t.Fatalf("submitting as bob: %v", err)
	}
	jobID, err := chromedp.Run(ctx, chromedp.AttributeValue(C("#submit-result"), "data-job"))
	if err != nil || jobID.Value == "" {
		t.Fatalf("no job id shown: %v", err)
	}
	id := jobID.Value
	if v := s.job(id); v.Project != "vision" || v.User != "bob" {
		t.Fatalf("job %s is in %s by %s, want vision by bob", id, v.Project, v.User)
	}
	row := fmt.Sprintf(`tr[data-job=%q]`, id)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(C(row+`[data-state="running"]`))); err != nil {
		t.Fatalf("job %s never shown running: %v\nserver log:\n%s", id, err, s.out)
	}
	// Efficient refresh: over a few refreshes, one jobs list per refresh
	// and no request for any single job.
	apiRequests(t, ctx)
	time.Sleep(5 * time.Second) // let the page refresh on its own (every 2 s)
	reqs := apiRequests(t, ctx)
	lists := matching(reqs, regexp.MustCompile(`^/v1/jobs\?`))
	single := matching(reqs, regexp.MustCompile(`^/v1/jobs/[^/?]+(\?|$)`))
	budgets := matching(reqs, regexp.MustCompile(`^/v1/budgets`))
	if len(lists) < 2 || len(lists) > 4 || len(single) > 0 || len(budgets) > 0 {
		t.Errorf("in 5 s the fleet page made %d job lists (want 2–4), %d single-job requests and %d budget requests (want none): %v %v", len(lists), len(single), len(budgets), single, budgets)
	}
	// bob sees the other project's GPU as in use, not whose.
	nodes, err := chromedp.Run(ctx, chromedp.Text(C("#nodes")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nodes, other) || !strings.Contains(nodes, "in use") || !strings.Contains(nodes, id) {
		t.Errorf("bob's GPU tiles = %q, want his job %s named and the other GPU only \"in use\" (not %s)", nodes, id, other)
	}
	if body, _ := chromedp.Run(ctx, chromedp.Text(C("body"))); strings.Contains(body, other) {
		t.Errorf("bob's page shows the other project's job %s", other)
	}
	saveScreenshot(t, ctx, "dashboard-tenant.png")

	// The job's page, through the link on its id.
	err = chromedp.Do(ctx,
		chromedp.Click(C(row+" a.job-link")),
		chromedp.WaitVisible(C("#job-page")),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="jp-logs"][contains(., "second log line")]`)),
	)
	if err != nil {
		logs, _ := chromedp.Run(ctx, chromedp.Text(C("#jp-logs")))
		t.Fatalf("job page of %s shows no log lines: %v (logs %q)\nserver log:\n%s", id, err, logs, s.out)
	}
	if u, _ := chromedp.Run(ctx, chromedp.Location()); !strings.HasSuffix(u, "/ui/jobs/"+id) {
		t.Errorf("the job page is at %s, want /ui/jobs/%s", u, id)
	}
	// Follow: the last line arrives while the page is open.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//pre[@id="jp-logs"][contains(., "last log line")]`))); err != nil {
		t.Fatalf("the followed log never showed the last line: %v", err)
	}
	gpuCharts, err := chromedp.Run(ctx, chromedp.Poll[string](axesScript("#jp-gpus"), chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(500*time.Millisecond)))
	if err != nil {
		t.Fatalf("the job page has no GPU plots with axes: %v", err)
	}
	var charts []chartInfo
	if err := json.Unmarshal([]byte(gpuCharts), &charts); err != nil {
		t.Fatal(err)
	}
	titles := map[string]chartInfo{}
	for _, c := range charts {
		titles[strings.Fields(c.Title)[0]] = c
		if !strings.Contains(strings.Join(c.Legend, ","), "GPU") {
			t.Errorf("chart %q's legend %v names no GPU", c.Title, c.Legend)
		}
		for _, x := range c.X {
			if !regexp.MustCompile(`^\d\d:\d\d(:\d\d)?$`).MatchString(x) {
				t.Errorf("chart %q's time axis label %q is not a clock time", c.Title, x)
			}
		}
	}
	if sm, ok := titles["SM"]; !ok || !strings.HasSuffix(sm.Y[len(sm.Y)-1], "%") {
		t.Errorf("no SM-active plot in percent: %+v", charts)
	}
	if _, ok := titles["Memory"]; !ok {
		t.Errorf("no memory plot: %+v", charts)
	}
	if _, ok := titles["Power"]; !ok {
		t.Errorf("no power plot: %+v", charts)
	}
	s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobSucceeded }, "succeeded")
	if _, err := chromedp.Run(ctx, chromedp.Poll[string](axesScript("#jp-cost"), chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(500*time.Millisecond))); err != nil {
		t.Fatalf("the job page has no cost plot with axes: %v\nserver log:\n%s", err, s.out)
	}
	// The page refreshes itself every 3 s: wait until it shows the end.
	ended := `document.querySelector("#job-page").textContent.includes("succeeded")`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](ended, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(500*time.Millisecond))); err != nil {
		t.Errorf("the job page never showed job %s succeeded: %v", id, err)
	}
	for _, want := range []string{"attempt 1 started", "first log line"} {
		if txt, _ := chromedp.Run(ctx, chromedp.Text(C("#job-page"))); !strings.Contains(txt, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	saveScreenshot(t, ctx, "dashboard-job-tenant.png")

	// The audit log has no request of bob's refused: the pages never
	// asked for what he may not read.
	for _, e := range decodeItems[model.AuditEntry](t, s.gpufleet("audit", "-o", "json")) {
		if e.Actor == "bob" && e.Result == 403 {
			t.Errorf("the dashboard made a request bob may not: %+v", e)
		}
	}

	// The admin, in a browser of their own: budgets panel, every project
	// in the picker; submits to vision; sees bob's job page with plots.
	actx := browser(t, 180*time.Second)
	err = chromedp.Do(actx,
		login(base+"/ui/jobs/"+id, adminTok),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="jp-logs"][contains(., "last log line")]`)),
	)
	if err != nil {
		t.Fatalf("admin on bob's job page: %v", err)
	}
	if _, err := chromedp.Run(actx, chromedp.Poll[string](axesScript("#jp-gpus"), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("admin sees no GPU plots: %v", err)
	}
	saveScreenshot(t, actx, "dashboard-job-admin.png")
	err = chromedp.Do(actx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitReady(C(`#job-project option[value="vision"]`)), // options have no box: ready, not visible
		chromedp.WaitVisible(C("#budgets-section")),
		chromedp.SetValue(C("#job-project"), "vision"),
		chromedp.SendKeys(C("#job-command"), "echo from the admin"),
		chromedp.Click(C("#submit-job")),
		chromedp.WaitVisible(C("#submit-result[data-job]")),
	)
	if err != nil {
		t.Fatalf("admin submitting to vision: %v", err)
	}
	picker, _ = chromedp.Run(actx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#job-project option")].map((o) => o.value)`))
	if !strings.Contains(strings.Join(picker, ","), "default") {
		t.Errorf("admin's picker = %v, want default among them", picker)
	}
	aj, _ := chromedp.Run(actx, chromedp.AttributeValue(C("#submit-result"), "data-job"))
	if v := s.job(aj.Value); v.Project != "vision" {
		t.Errorf("the admin's job %s went to %s, want the picked vision", aj.Value, v.Project)
	}
	// The admin's tiles name the other job's holder.
	if err := chromedp.Do(actx, chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//div[@id="nodes"]//a[.=%q]`, other)))); err != nil {
		t.Errorf("the admin's GPU tiles do not name job %s: %v", other, err)
	}
	if _, err := chromedp.Run(actx, chromedp.Poll[string](axesScript("#cost"), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("the fleet page's cost chart has no axes: %v", err)
	}
	if txt, _ := chromedp.Run(actx, chromedp.Text(C("#cost"))); strings.Contains(txt, "__idle__") {
		t.Errorf("the cost chart shows a raw __idle__ label: %q", txt)
	}
	saveScreenshot(t, actx, "dashboard-admin.png")
}
