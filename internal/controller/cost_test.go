package controller

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// receiver is a webhook endpoint that fails its first failFirst requests,
// verifies every signature and counts notifications by id.
type receiver struct {
	t         *testing.T
	secret    []byte
	mu        sync.Mutex
	failFirst int
	requests  int
	seen      map[string]int
	bodies    map[string][]byte // the last body by id
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests++
	if !Verify(rc.secret, body, r.Header.Get(HeaderSignature)) {
		rc.t.Errorf("bad signature on %s", r.Header.Get(HeaderNotificationID))
	}
	if rc.requests <= rc.failFirst {
		http.Error(w, "injected failure", http.StatusServiceUnavailable)
		return
	}
	rc.seen[r.Header.Get(HeaderNotificationID)]++ // deduplicated by id: a repeat would count 2
	if rc.bodies == nil {
		rc.bodies = map[string][]byte{}
	}
	rc.bodies[r.Header.Get(HeaderNotificationID)] = body
	w.WriteHeader(http.StatusNoContent)
}

func newCostHarness(t *testing.T, clk *clock.Fake, cc CostConfig) *harness {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cc.MeterInterval = -1 // the test drives CostPass
	c, err := New(context.Background(), Config{
		Store: newMemStore(), Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: t.TempDir(), HeartbeatTimeout: 1000 * time.Hour, PassGap: -1, Cost: cc,
		Alerts: AlertRules{QueueWaitP95: -1}, // held jobs wait for days: only budget firings here
		Fatal:  func(err error) { t.Errorf("fatal: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, clk: clk, c: c, cancel: cancel, done: make(chan struct{})}
	go func() { _ = c.Run(ctx); close(h.done) }()
	t.Cleanup(func() { h.stop(); c.Close() })
	return h
}

func (h *harness) registerNode(id string, gpus int, ct model.CapacityType) {
	h.t.Helper()
	reg := agentapi.Registration{NodeID: id, Name: id, Provider: "static", CPU: 16, Memory: 64 * model.GiB, CapacityType: ct}
	for i := 0; i < gpus; i++ {
		reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: id + "-gpu" + string(rune('a'+i)), Model: "H100", Memory: 80 * model.GiB})
	}
	if _, err := h.c.Register(context.Background(), reg); err != nil {
		h.t.Fatal(err)
	}
}

// TestCostMonth runs a budgeted fleet over a month on the fake clock: an
// owned node priced by the custom price file and a spot node, three
// projects. It checks per-project totals against an independent
// recomputation, that the 80% threshold fires once per period and its
// webhook arrives once (through injected failures, signatures verified),
// that block-new refuses and then re-admits after the roll-over, and that
// stop-spot drains the spot job through the stop path and holds it.
func TestCostMonth(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	secret := []byte("s3cret")
	rc := &receiver{t: t, secret: secret, failFirst: 3, seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,own,36\nnode,spot,18\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newCostHarness(t, clk, CostConfig{Prices: prices, WebhookURL: srv.URL, WebhookSecret: secret})
	h.registerNode("own", 2, model.Owned) // $36/h: $18 per GPU-hour = 5000 µ$/s
	h.registerNode("spot", 2, model.Spot) // $18/h: $9 per GPU-hour = 2500 µ$/s
	budgets := &manifest.Set{Budgets: []manifest.Budget{
		{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget, Metadata: manifest.ObjectMeta{Name: "nlp"}, Spec: manifest.BudgetSpec{
			Scope: model.BudgetScope{Project: "nlp"}, Amount: 1000 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
			Thresholds: []model.BudgetThreshold{{Percent: 80, Action: model.ActionNotify}, {Percent: 100, Action: model.ActionBlockNew}}}},
		{APIVersion: "gpufleet.dev/v1", Kind: manifest.KindBudget, Metadata: manifest.ObjectMeta{Name: "spotty"}, Spec: manifest.BudgetSpec{
			Scope: model.BudgetScope{Project: "vision"}, Amount: 100 * model.Dollar, Period: model.BudgetPeriod{Kind: model.PeriodMonthly, StartDay: 1},
			Thresholds: []model.BudgetThreshold{{Percent: 50, Action: model.ActionStopSpot}}}},
	}}
	if _, err := h.c.ApplyFleet(ctx, budgets, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	submit := func(project string, spot model.SpotPolicy) (*model.Job, error) {
		spec := model.JobSpec{Resources: model.Resources{GPUs: 1}, Spot: spot, Run: model.RunSpec{Command: []string{"true"}}}
		spec.Default()
		j, _, err := h.c.Submit(ctx, Submission{Project: project, User: "u", Spec: spec})
		return j, err
	}
	nlp, err := submit("nlp", model.SpotNever)
	if err != nil {
		t.Fatal(err)
	}
	vision, err := submit("vision", model.SpotRequired)
	if err != nil {
		t.Fatal(err)
	}
	// Start both: the agents report them running.
	for _, node := range []string{"own", "spot"} {
		h.node = node
		resp := h.waitDesired(1)
		h.sync(running(resp.Replicas[0].ID))
	}
	h.waitJob(nlp.ID, model.JobRunning)
	h.waitJob(vision.ID, model.JobRunning)
	if err := h.c.CostPass(ctx); err != nil { // starts the meter at `start`
		t.Fatal(err)
	}

	// 60 hours, a pass every hour: nlp spends $18/h, so 80% ($800) is
	// crossed in hour 45 and 100% in hour 56; vision spends $9/h, so its
	// 50% ($50) stop-spot fires in hour 6.
	for hour := 1; hour <= 60; hour++ {
		clk.Advance(time.Hour)
		if err := h.c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
		if hour == 6 {
			// stop-spot asked the spot job to stop through the drain path.
			a, ok := h.c.st.LiveAttempt(vision.ID)
			if !ok || !a.Stop || a.StopState != model.AttemptPreempted || !strings.HasPrefix(a.StopWhy, budgetStopPrefix) {
				t.Fatalf("vision attempt after stop-spot: %+v", a)
			}
			h.node = "spot"
			resp := h.sync()
			if !resp.Replicas[0].Stop {
				t.Fatalf("agent not told to stop the spot replica: %+v", resp.Replicas[0])
			}
			h.sync(exited(resp.Replicas[0].ID, 0, agentapi.ReasonStopped))
			j := h.waitJob(vision.ID, model.JobQueued)
			if j.Preemptions != 0 {
				t.Errorf("budget stop counted as an interruption: %d", j.Preemptions)
			}
		}
	}
	h.await()
	if v, ok := h.c.Verdict(vision.ID); !ok || len(v.Reasons) == 0 || !strings.Contains(v.Reasons[0].Message, "held by budget spotty") {
		t.Errorf("vision verdict = %+v, want held by budget spotty", v)
	}
	now := start.Add(60 * time.Hour)
	// Independent recomputation from the events: nlp ran all 60 h on one of
	// own's two GPUs; vision ran 6 h (stopped at the hour-6 pass, exited
	// then) on one of spot's; the rest is idle.
	wantNLP := model.Money(60 * 3600 * 5000)
	wantVision := model.Money(6 * 3600 * 2500)
	wantNodes := model.Money(60*3600*10000) + model.Money(60*3600*5000)
	rep, err := h.c.CostReport(cost.Query{From: start, To: now, GroupBy: []string{"project"}, Idle: cost.IdleShown})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]model.Money{}
	for _, r := range rep.Rows {
		got[r.Group[0]] += r.Cost
	}
	if got["nlp"] != wantNLP || got["vision"] != wantVision || rep.Total != wantNodes {
		t.Errorf("totals: nlp %s (want %s), vision %s (want %s), all %s (want %s)", got["nlp"], wantNLP, got["vision"], wantVision, rep.Total, wantNodes)
	}
	if jc, ok := h.c.JobCost(nlp.ID); !ok || jc.Total != wantNLP {
		t.Errorf("nlp job cost = %+v, want %s", jc, wantNLP)
	}

	// block-new refuses nlp work, not other projects.
	if _, err := submit("nlp", model.SpotNever); !errors.Is(err, ErrBudget) {
		t.Errorf("nlp submission after 100%%: err = %v, want ErrBudget", err)
	}
	if _, err := submit("research", model.SpotNever); err != nil {
		t.Errorf("research submission: %v", err)
	}

	// Webhooks: retried through injected failures, each id seen once.
	for i := 0; i < 10; i++ {
		h.c.deliverDue(ctx)
		clk.Advance(time.Minute)
	}
	rc.mu.Lock()
	wantSeen := map[string]int{"nlp/0/2026-12-01": 1, "nlp/1/2026-12-01": 1, "spotty/0/2026-12-01": 1}
	for id, n := range wantSeen {
		if rc.seen[id] != n {
			t.Errorf("notification %s seen %d times, want %d (all: %v)", id, rc.seen[id], n, rc.seen)
		}
	}
	if len(rc.seen) != len(wantSeen) || rc.requests != 3+len(wantSeen) {
		t.Errorf("requests %d, seen %v", rc.requests, rc.seen)
	}
	rc.mu.Unlock()

	// More passes in the same period fire nothing again.
	fired := h.c.cost.budgets.Len()
	for i := 0; i < 5; i++ {
		clk.Advance(time.Hour)
		if err := h.c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.c.cost.budgets.Len(); n != fired {
		t.Errorf("fired keys grew from %d to %d within one period", fired, n)
	}

	// The period rolls over: nlp is admitted again, thresholds re-arm.
	clk.Set(time.Date(2027, 1, 1, 0, 1, 0, 0, time.UTC))
	if err := h.c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := submit("nlp", model.SpotNever); err != nil {
		t.Errorf("nlp submission in the new period: %v", err)
	}
	var nlpStatus BudgetStatus
	for _, b := range h.c.Budgets(0) {
		if b.Budget.Name == "nlp" {
			nlpStatus = b
		}
	}
	if len(nlpStatus.Fired) != 0 || nlpStatus.Blocked {
		t.Errorf("nlp budget in the new period: %+v", nlpStatus)
	}
}
