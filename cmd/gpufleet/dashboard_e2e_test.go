package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

// The dashboard in headless Chromium against a real server on loopback:
// log in with a user token, submit a job, watch it run and finish, see
// its cost column and the node's simulated GPU telemetry, and keep a
// screenshot.
func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	dataDir := t.TempDir()
	s := startServer(t, dataDir, freePort(t))
	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()

	base := "http://" + s.listen
	type C = chromedp.CSS
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(C("#token")),
		chromedp.SendKeys(C("#token"), token),
		chromedp.Click(C("#login-submit")),
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
	// The cost column shows the ledger's cost once the server has metered
	// the job; a server without metering shows a dash.
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	werr := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//tr[@data-job=%q]/td[@class="cost" and starts-with(normalize-space(.), "$")]`, jobID))))
	wcancel()
	cost, err := chromedp.Run(ctx, chromedp.Text(C(row+" td.cost")))
	if err != nil {
		t.Fatalf("reading the cost of job %s: %v", jobID, err)
	}
	if v := s.job(jobID); werr != nil && v.Cost != nil {
		t.Errorf("the API has job %s's cost (%v) but the dashboard shows %q", jobID, v.Cost.Total, cost)
	}
	if !strings.Contains(nodes, "H100") {
		t.Errorf("nodes section = %q, want the H100 GPUs", nodes)
	}
	t.Logf("job %s succeeded; its cost cell reads %q", jobID, cost)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactDir(t), "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s", path)
	fmt.Println("dashboard screenshot:", path)
}
