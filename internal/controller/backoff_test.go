package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// waitBackoff polls until the last pass put the queued job on hold for its
// crash-loop back-off, and fails if the job is placed instead.
func (h *harness) waitBackoff(id string) (*model.Job, scheduler.Verdict) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e, err := h.c.Explain(id)
		if err != nil {
			h.t.Fatal(err)
		}
		if !e.Pending {
			h.t.Fatalf("job %s is %s during its back-off, want it queued", id, e.State)
		}
		if v := e.Verdict; v != nil && v.RetryAt != nil {
			j, _ := h.c.Job(id)
			return j, *v
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s has no back-off verdict: %+v", id, e.Verdict)
		}
		h.await()
	}
}

// TestCrashLoopBacksOff checks the crash-loop back-off: a failed attempt
// that requeues waits 10s, then 20s (model.FailureBackoff) before the next
// attempt is placed, also across a restart of the server, while a lost
// attempt requeues at once.
func TestCrashLoopBacksOff(t *testing.T) {
	st := newMemStore()
	clk := clock.NewFake(t0)
	h := newHarness(t, st, clk)
	node := h.register("", 1)
	spec := cmdSpec(1)
	spec.Retries.Failures = 3
	j := h.submit(spec)

	type hold struct {
		Failures int
		RetryAt  time.Time
		Code     string
		Desired  int
	}
	fail := func(h *harness, attempt int) {
		t.Helper()
		rs := h.waitDesired(1).Replicas[0]
		if rs.Attempt != attempt {
			t.Fatalf("desired attempt %d, want %d", rs.Attempt, attempt)
		}
		h.sync(running(rs.ID), exited(rs.ID, 3, ""))
	}
	check := func(h *harness, want hold) {
		t.Helper()
		jj, v := h.waitBackoff(j.ID)
		got := hold{Failures: jj.Failures, Code: v.Reasons[0].Code, Desired: len(h.sync().Replicas)}
		if jj.RetryAt != nil {
			got.RetryAt = *jj.RetryAt
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("after failure %d (-want +got):\n%s", want.Failures, diff)
		}
	}

	fail(h, 1)
	check(h, hold{Failures: 1, RetryAt: t0.Add(10 * time.Second), Code: scheduler.ReasonBackoff})
	clk.Advance(9 * time.Second)
	check(h, hold{Failures: 1, RetryAt: t0.Add(10 * time.Second), Code: scheduler.ReasonBackoff})
	clk.Advance(time.Second)
	fail(h, 2)
	check(h, hold{Failures: 2, RetryAt: t0.Add(30 * time.Second), Code: scheduler.ReasonBackoff})

	// The back-off is the job's, in the store: a restart keeps it.
	h.stop()
	h.c.Close()
	clk2 := clock.NewFake(clk.Now().Add(10 * time.Second))
	h2 := newHarness(t, st, clk2)
	h2.register(node, 1)
	check(h2, hold{Failures: 2, RetryAt: t0.Add(30 * time.Second), Code: scheduler.ReasonBackoff})
	clk2.Advance(10 * time.Second)

	// A lost attempt is not a crash: the job requeues without a back-off.
	rs := h2.waitDesired(1).Replicas[0]
	if rs.Attempt != 3 {
		t.Fatalf("desired attempt %d, want 3", rs.Attempt)
	}
	h2.sync(agentapi.ReplicaStatus{ID: rs.ID, Phase: agentapi.PhaseLost, Reason: model.ReasonLost})
	rs = h2.waitDesired(1).Replicas[0]
	if rs.Attempt != 4 {
		t.Fatalf("desired attempt %d after a lost attempt, want 4 at once", rs.Attempt)
	}
	if jj, _ := h2.c.Job(j.ID); jj.RetryAt != nil || jj.Failures != 2 {
		t.Fatalf("after a lost attempt: retryAt %v failures %d, want none and 2", jj.RetryAt, jj.Failures)
	}
}

// TestStartingNodeIsNotLost: a node whose agent keeps syncing while it is
// still starting its replicas (nothing to report yet, for longer than the
// heartbeat timeout) is not lost, and its attempt keeps its place.
func TestStartingNodeIsNotLost(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	node := h.register("", 1)
	j := h.submit(cmdSpec(1))
	h.waitDesired(1)
	for range 6 { // 3m in all, past the 1m heartbeat timeout
		clk.Advance(30 * time.Second)
		if _, err := h.c.Sync(context.Background(), agentapi.SyncRequest{NodeID: node, Starting: 1}); err != nil {
			t.Fatal(err)
		}
		h.await()
	}
	if nodes := h.c.Nodes(); nodes[0].State != model.NodeReady {
		t.Fatalf("node is %s after syncs that report a replica still starting, want ready", nodes[0].State)
	}
	if jj, _ := h.c.Job(j.ID); jj.State != model.JobAdmitted || jj.Attempts != 1 {
		t.Fatalf("job is %s after %d attempts, want admitted after 1", jj.State, jj.Attempts)
	}
}
