package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestFenceRefusedAttemptCostsNoRetry: a job's launch reaches its node's
// supervisor after the node's fence has passed, more times than its
// retries.preemptions allows; each time the supervisor refuses to start it
// and the agent reports it lost and never started. The job is requeued
// each time without an interruption counted, then runs, succeeds, and is
// billed only the attempt that ran.
func TestFenceRefusedAttemptCostsNoRetry(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	refusals := model.DefaultPreemptionRetries + 1
	for i := range refusals {
		clk.Advance(2 * time.Second)
		end := clk.Now()
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{
			{ID: rid, Phase: agentapi.PhaseLost, Reason: agentapi.ReasonFenced, EndedAt: &end, NeverStarted: true}}}); err != nil {
			t.Fatal(err)
		}
		j, _ := c.Job(jobID)
		if j.State != model.JobQueued || j.Preemptions != 0 {
			t.Fatalf("after refusal %d the job is %s with %d interruptions counted, want queued with none", i+1, j.State, j.Preemptions)
		}
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(model.RefusalBackoff(i + 1))
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1"})
		if err != nil || len(resp.Replicas) != 1 {
			t.Fatalf("desired set after refusal %d: %+v, %v", i+1, resp, err)
		}
		if resp.Replicas[0].ID == rid {
			t.Fatalf("after refusal %d the node was given the refused replica %s again", i+1, rid)
		}
		rid = resp.Replicas[0].ID
	}
	clk.Advance(time.Second)
	start := clk.Now()
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{
		{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &start}}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	end := clk.Now()
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{exitedAt(rid, 0, "", start, end)}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	j, _ := c.Job(jobID)
	if j.State != model.JobSucceeded || j.Preemptions != 0 {
		t.Fatalf("job %s with %d interruptions counted, want succeeded with none", j.State, j.Preemptions)
	}
	checkMeteredOnce(t, st, jobID, start, end)
}

// TestRefusalsAreCappedAndBackedOff: a node refuses a job's launch every
// time. Each refusal holds the job back before its next placement (a pass
// right after it places nothing); past MaxRefusals a refusal counts as an
// ordinary interruption, so the loop ends with the job failed once its
// preemption retries are spent, not bound and refused forever.
func TestRefusalsAreCappedAndBackedOff(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	var j *model.Job
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatalf("the job is still requeued after %d refusals", i)
		}
		clk.Advance(time.Second)
		end := clk.Now()
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{
			{ID: rid, Phase: agentapi.PhaseLost, Reason: agentapi.ReasonFenced, EndedAt: &end, NeverStarted: true}}}); err != nil {
			t.Fatal(err)
		}
		j, _ = c.Job(jobID)
		if j.State != model.JobQueued {
			break
		}
		if i < j.MaxRefusals() { // a free refusal: backed off
			if err := c.pass(ctx); err != nil {
				t.Fatal(err)
			}
			if resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1"}); err != nil || len(resp.Replicas) != 0 {
				t.Fatalf("refusal %d: placed again at once, within its back-off: %d replicas, %v", i+1, len(resp.Replicas), err)
			}
		}
		clk.Advance(30 * time.Second)
		if err := c.pass(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1"})
		if err != nil || len(resp.Replicas) != 1 {
			t.Fatalf("refusal %d: not placed after its back-off: %+v, %v", i+1, resp, err)
		}
		rid = resp.Replicas[0].ID
	}
	want := j.MaxRefusals() + j.Spec.Retries.Preemptions + 1
	if j.State != model.JobFailed || j.Refusals != j.MaxRefusals() || j.Preemptions != j.Spec.Retries.Preemptions+1 || j.Attempts != want {
		t.Errorf("job %s after %d attempts with %d refusals and %d interruptions, want failed after %d (%d free refusals, then %d interruptions)",
			j.State, j.Attempts, j.Refusals, j.Preemptions, want, j.MaxRefusals(), j.Spec.Retries.Preemptions+1)
	}
}
