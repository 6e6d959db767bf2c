package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpufleet/gpufleet/internal/api"
)

// chromium finds Debian's Chromium. Outside CI a machine without it skips
// the dashboard test; in CI (CI=true) .ci/run installs it, so its absence
// fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUFLEET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the dashboard test needs it and runs in CI")
	return ""
}

// artifactDir is where the test keeps its screenshot: $GPUFLEET_ARTIFACTS,
// else testdata/artifacts (ignored by git).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUFLEET_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	return abs
}

// browser starts a headless Chromium of its own (own profile, so its own
// cookies) and returns a context for it with a deadline.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelCtx)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// dashboardServer starts the server the dashboard tests drive: the demo
// H100s, metered every 2 s so that costs show within the test. It returns
// the server and its admin token; a machine without Chromium skips first.
func dashboardServer(t *testing.T) (*serverProc, string) {
	t.Helper()
	chromium(t)
	dataDir := t.TempDir()
	s := startServer(t, dataDir, freePort(t), "--meter-interval", "2s")
	token, err := os.ReadFile(filepath.Join(dataDir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return s, strings.TrimSpace(string(token))
}

// login opens url, which shows the login form to a browser without a
// session, and signs in with token.
func login(url, token string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-submit")),
	)
}

// saveArtifact keeps data under artifactDir (a screenshot, for people to
// look at) and logs where.
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	path := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s", path)
}

// saveScreenshot keeps a screenshot of the whole page.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	saveArtifact(t, name, png)
}

// The dashboard in headless Chromium against a real server on loopback:
// log in with a user token, submit a job, watch it run and finish, see
// its cost — the demo H100s are priced from the catalog, so a non-zero
// dollar amount — and the node's simulated GPU telemetry, and keep
// screenshots of the page and of the job's row.
func TestDashboardInChromium(t *testing.T) {
	s, token := dashboardServer(t)
	ctx := browser(t, 120*time.Second)
	type C = chromedp.CSS
	err := chromedp.Do(ctx,
		login("http://"+s.listen+"/", token),
		chromedp.WaitVisible(C("#job-command")),
		chromedp.SendKeys(C("#job-name"), "from-the-dashboard"),
		chromedp.SendKeys(C("#job-command"), "echo hello from chromium; sleep 8"),
		chromedp.Click(C("#submit-job")),
		chromedp.WaitVisible(C("#submit-result[data-job]")),
	)
	if err != nil {
		t.Fatalf("logging in and submitting: %v\nserver log:\n%s", err, s.out)
	}
	res, err := chromedp.Run(ctx, chromedp.AttributeValue(C("#submit-result"), "data-job"))
	jobID := res.Value
	if err != nil || jobID == "" {
		t.Fatalf("the dashboard showed no job id: %v", err)
	}
	row := fmt.Sprintf(`tr[data-job=%q]`, jobID)
	err = chromedp.Do(ctx,
		chromedp.WaitVisible(C(row+`[data-state="running"]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="nodes"]//span[contains(., "simulated telemetry")]`)),
	)
	if err != nil {
		t.Fatalf("watching job %s run: %v\nserver log:\n%s", jobID, err, s.out)
	}
	if top := s.gpufleet("jobs", "top", "--once"); !strings.Contains(top, jobID) {
		t.Errorf("jobs top --once does not show running job %s:\n%s", jobID, top)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Text(C("#nodes")))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(C(row+`[data-state="succeeded"]`))); err != nil {
		t.Fatalf("watching job %s finish: %v\nserver log:\n%s", jobID, err, s.out)
	}
	// The server meters every 2 s here: wait until the ledger covers the
	// whole attempt (the meter charges whole seconds, from the start's
	// second to the end's), so the cost is final; the dashboard then shows
	// it as a non-zero dollar amount.
	var final api.JobView
	for deadline := time.Now().Add(45 * time.Second); ; {
		final = s.job(jobID)
		if c, a := final.Cost, final.AttemptDetails; c != nil && len(a) == 1 && a[0].StartedAt != nil && a[0].EndedAt != nil &&
			math.Round(c.GPUHours*3600) == final.Spec.Resources.GPUs*float64(a[0].EndedAt.Unix()-a[0].StartedAt.Unix()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s's metered cost never covered its run: %+v\nserver log:\n%s", jobID, final.Cost, s.out)
		}
		time.Sleep(200 * time.Millisecond) // polling the API for the next metering pass; bounded by the deadline
	}
	total := final.Cost.Total.Dollars()
	if total <= 0 {
		t.Fatalf("job %s ran on priced demo H100s but cost %v", jobID, final.Cost.Total)
	}
	// The page refreshes on its own: wait until it shows the final amount
	// (to its last shown digit: amounts under $1 show four decimals), not an earlier live estimate.
	shownCost := fmt.Sprintf(`(() => { const c = document.querySelector('tr[data-job=%q] td.cost');
		const m = /^\$([0-9]+(?:\.[0-9]+)?)$/.exec(c ? c.textContent.trim() : "");
		return m && Number(m[1]) > 0 && Math.abs(Number(m[1]) - %g) <= 0.000051 ? m[0] : false; })()`, jobID, total)
	cost, err := chromedp.Run(ctx, chromedp.Poll[string](shownCost, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		cell, _ := chromedp.Run(ctx, chromedp.Text(C(row+" td.cost")))
		t.Fatalf("job %s's cost cell reads %q, want $%.4f: %v", jobID, cell, total, err)
	}
	if !strings.Contains(nodes, "H100") {
		t.Errorf("nodes section = %q, want the H100 GPUs", nodes)
	}

	// Screenshots: the page with the job's row in view, and the row alone;
	// the cost must read the same non-zero amount while they are taken.
	if err := chromedp.Do(ctx, chromedp.ScrollIntoView(C(row))); err != nil {
		t.Fatalf("scrolling to job %s: %v", jobID, err)
	}
	rowPNG, err := chromedp.Run(ctx, chromedp.Screenshot(C(row), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("screenshot of job %s's row: %v", jobID, err)
	}
	t.Logf("job %s succeeded; its cost cell reads %q", jobID, cost)

	saveArtifact(t, "dashboard-job-cost.png", rowPNG)
	saveScreenshot(t, ctx, "dashboard.png")
	if after, err := chromedp.Run(ctx, chromedp.Text(C(row+" td.cost"))); err != nil || after != cost {
		t.Errorf("the cost cell changed while the screenshots were taken: %q, then %q (%v)", cost, after, err)
	}
}
