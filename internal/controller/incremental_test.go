package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
)

// newPassController is a controller on a fake clock whose passes the test
// runs itself (no Run loop), over st.
func newPassController(t *testing.T, st *memStore, clk *clock.Fake) *Controller {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Minute, PassGap: -1, Fatal: func(err error) { t.Errorf("fatal: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// schedules is how many passes have run the scheduler.
func (c *Controller) schedules() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.memo.schedules
}

// TestIdlePassesDoNoWork: with an unchanged world, passes after the first
// do not run the scheduler, however often the clock ticks, and the
// verdicts stay; every input the issue lists (a new node, a cancel, a
// back-off ending, a lost node, a queue change, a submission) makes the
// next pass run it, and once that pass's own bindings are seen the passes
// are idle again.
func TestIdlePassesDoNoWork(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	const queued = 300
	for i := 0; i < queued; i++ {
		spec := cmdSpec(1)
		spec.Default()
		j := &model.Job{ID: fmt.Sprintf("j%04d", i), Seq: uint64(i + 1), Version: 1, Project: "default", State: model.JobQueued, Spec: spec, EnqueuedAt: t0}
		st.jobs[j.ID] = j
	}
	// One job backs off until t0+100s after a failed attempt.
	retry := t0.Add(100 * time.Second)
	st.jobs["j0000"].RetryAt, st.jobs["j0000"].Failures = &retry, 1
	clk := clock.NewFake(t0)
	c := newPassController(t, st, clk)

	pass := func() {
		t.Helper()
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// settle runs passes a second apart until one skips, and returns how
	// many ran the scheduler.
	settle := func(what string) uint64 {
		t.Helper()
		before := c.schedules()
		for i := 0; i < 5; i++ {
			clk.Advance(time.Second)
			n := c.schedules()
			pass()
			if c.schedules() == n {
				return n - before
			}
		}
		t.Fatalf("%s: 5 passes in a row ran the scheduler", what)
		return 0
	}
	// idle fails if any of n passes, a second apart, runs the scheduler.
	idle := func(what string, n int) {
		t.Helper()
		before := c.schedules()
		for i := 0; i < n; i++ {
			clk.Advance(time.Second)
			pass()
		}
		if got := c.schedules() - before; got != 0 {
			t.Fatalf("%s: %d of %d passes over an unchanged world ran the scheduler, want 0", what, got, n)
		}
	}
	// changed fails unless the next pass runs the scheduler.
	changed := func(what string) {
		t.Helper()
		before := c.schedules()
		pass()
		if c.schedules() == before {
			t.Fatalf("%s: the next pass did not run the scheduler", what)
		}
		settle(what)
	}

	if settle("start") != 1 {
		t.Fatalf("start: want one pass to run the scheduler")
	}
	idle("no nodes", 30)
	if e, err := c.Explain("j0005"); err != nil || e.Verdict == nil || len(e.Verdict.Reasons) == 0 {
		t.Fatalf("a skipped pass lost the verdict: %+v, %v", e.Verdict, err)
	}

	// A new node: one job binds (not the one backing off).
	reg, err := c.Register(ctx, agentapi.Registration{Name: "n1", Provider: "local", Region: "local", CPU: 16, Memory: 64 * model.GiB,
		GPUs: []model.GPU{{Index: 0, UUID: "GPU-a", Model: "H100", Memory: 80 * model.GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	changed("new node")
	if got := c.st.LiveCount(); got != 1 {
		t.Fatalf("%d live attempts after a node registered, want 1", got)
	}
	idle("full node", 10)

	// A cancel of a queued job.
	if _, err := c.Cancel(ctx, "j0100"); err != nil {
		t.Fatal(err)
	}
	changed("cancel")
	idle("after cancel", 5)

	// The back-off ends at t0+100s: the pass at that time runs, the ones
	// before it do not.
	for clk.Now().Add(time.Second).Before(retry) {
		idle("during the back-off", 1)
	}
	clk.Advance(time.Second)
	before := c.schedules()
	pass()
	if c.schedules() == before {
		t.Fatalf("the pass at the back-off's end (%s) did not run the scheduler", clk.Now().Sub(t0))
	}
	if e, _ := c.Explain("j0000"); e.Verdict == nil || e.Verdict.RetryAt != nil {
		t.Fatalf("after its back-off j0000's verdict is %+v, want no RetryAt", e.Verdict)
	}
	settle("after the back-off")
	idle("after the back-off", 5)

	// The node falls silent and is lost; its attempt requeues.
	clk.Advance(2 * time.Minute)
	c.checkNodes(ctx)
	if n, _ := c.st.Node(reg.NodeID); n.State != model.NodeLost {
		t.Fatalf("node is %s, want lost", n.State)
	}
	changed("node lost")
	idle("after the loss", 5)

	// A queue change and a submission.
	if _, _, err := c.PutQueue(ctx, "research", model.QueueSpec{Weight: 2}); err != nil {
		t.Fatal(err)
	}
	changed("queue")
	spec := cmdSpec(1)
	spec.Default()
	if _, _, err := c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	changed("submission")

	// However long nothing changes, the verdicts are refreshed every
	// passRefresh.
	before = c.schedules()
	for i := 0; i < int(2*passRefresh/time.Second); i++ {
		clk.Advance(time.Second)
		pass()
	}
	if got := c.schedules() - before; got < 1 || got > 2 {
		t.Fatalf("%d passes ran the scheduler over %s of an unchanged world, want 1 or 2 (every %s)", got, 2*passRefresh, passRefresh)
	}
}

// TestSettledCommitSkipsTheNextPass: a pass whose plan the scheduler marks
// settled (scheduler.Plan.Settled) and that commits every binding leaves
// the memo current, so the pass right after it, at the same time, does not
// run the scheduler; with a second queue holding jobs the plan is not
// settled and that pass runs. Either way the job bound is the one the
// queue order puts first.
func TestSettledCommitSkipsTheNextPass(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queues    []string
		wantSkips bool
	}{
		{"one queue", []string{model.DefaultQueue}, true},
		{"two queues", []string{model.DefaultQueue, "research"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newMemStore()
			for i := range 40 {
				spec := cmdSpec(1)
				spec.Queue = tc.queues[i%len(tc.queues)]
				spec.Default()
				j := &model.Job{ID: fmt.Sprintf("j%04d", i), Seq: uint64(i + 1), Version: 1, Project: "default", State: model.JobQueued, Spec: spec, EnqueuedAt: t0}
				st.jobs[j.ID] = j
			}
			clk := clock.NewFake(t0)
			c := newPassController(t, st, clk)
			for _, q := range tc.queues[1:] {
				if _, _, err := c.PutQueue(ctx, q, model.QueueSpec{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.pass(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Register(ctx, agentapi.Registration{Name: "n1", Provider: "local", Region: "local", CPU: 16, Memory: 64 * model.GiB,
				GPUs: []model.GPU{{Index: 0, UUID: "GPU-a", Model: "H100", Memory: 80 * model.GiB}}}); err != nil {
				t.Fatal(err)
			}
			before := c.schedules()
			if err := c.pass(ctx); err != nil { // binds one job to the GPU
				t.Fatal(err)
			}
			if err := c.pass(ctx); err != nil { // the pass after the commit
				t.Fatal(err)
			}
			ran := c.schedules() - before
			if want := map[bool]uint64{true: 1, false: 2}[tc.wantSkips]; ran != want {
				t.Fatalf("%d of the two passes ran the scheduler, want %d", ran, want)
			}
			running := 0
			for _, j := range c.Jobs(JobFilter{}) {
				if j.State != model.JobQueued {
					running++
					if j.ID != "j0000" && tc.wantSkips {
						t.Errorf("bound %s, want j0000 (first in the queue)", j.ID)
					}
				}
			}
			if running != 1 {
				t.Fatalf("%d jobs left the queue, want 1 (one GPU)", running)
			}
		})
	}
}
