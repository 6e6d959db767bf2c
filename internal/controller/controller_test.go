package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func cmdSpec(gpus float64) model.JobSpec {
	return model.JobSpec{Resources: model.Resources{GPUs: gpus}, Run: model.RunSpec{Command: []string{"sh", "-c", "true"}, Env: map[string]string{"LR": "3e-4"}}}
}

func TestJobRunsToSuccess(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 8)
	j := h.submit(cmdSpec(2))

	resp := h.waitDesired(1)
	rs := resp.Replicas[0]
	if rs.ID != model.ReplicaID(model.AttemptID(j.ID, 1), 0) {
		t.Fatalf("replica id = %s", rs.ID)
	}
	for k, want := range map[string]string{
		"GPUFLEET_JOB_ID": j.ID, "GPUFLEET_ATTEMPT": "1", "CUDA_VISIBLE_DEVICES": "0,1",
		"GPUFLEET_SERVER": "http://127.0.0.1:7777", "LR": "3e-4", "WORLD_SIZE": "1", "RANK": "0",
	} {
		if got := rs.Env[k]; got != want {
			t.Errorf("env %s = %q, want %q", k, got, want)
		}
	}
	secret := rs.Env["GPUFLEET_JOB_TOKEN"]
	tok, err := h.c.Identity().Authenticate(secret)
	if err != nil || tok.Kind != model.TokenJob || tok.Subject != j.ID {
		t.Fatalf("job token does not authenticate as the job: %v %+v", err, tok)
	}
	if st, err := os.Stat(rs.Env["GPUFLEET_CHECKPOINT_DIR"]); err != nil || !st.IsDir() {
		t.Fatalf("checkpoint dir not created: %v", err)
	}
	// The folder is made once per attempt, not at every sync: removed
	// behind the controller's back, a later sync does not remake it.
	if err := os.Remove(rs.Env["GPUFLEET_CHECKPOINT_DIR"]); err != nil {
		t.Fatal(err)
	}
	if got := h.sync(); len(got.Replicas) != 1 || got.Replicas[0].Env["GPUFLEET_CHECKPOINT_DIR"] != rs.Env["GPUFLEET_CHECKPOINT_DIR"] {
		t.Fatalf("second sync desired %+v", got.Replicas)
	}
	if _, err := os.Stat(rs.Env["GPUFLEET_CHECKPOINT_DIR"]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint dir made again by a later sync: %v", err)
	}

	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	h.sync(exited(rs.ID, 0, ""))
	done := h.waitJob(j.ID, model.JobSucceeded)
	if done.ExitCode == nil || *done.ExitCode != 0 || done.FinishedAt == nil {
		t.Fatalf("finished job = %+v", done)
	}
	if len(h.sync().Replicas) != 0 {
		t.Fatal("finished replica still desired")
	}
	if _, err := h.c.Identity().Authenticate(secret); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("job token still valid after the job ended: %v", err)
	}
}

func TestFailureRetriesThenFails(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 1)
	spec := cmdSpec(1)
	spec.Retries.Failures = 1
	j := h.submit(spec)
	for attempt := 1; attempt <= 2; attempt++ {
		if attempt > 1 {
			h.waitBackoff(j.ID)
			clk.Advance(model.FailureBackoff(attempt - 1))
		}
		rs := h.waitDesired(1).Replicas[0]
		if rs.Attempt != attempt {
			t.Fatalf("desired attempt %d, want %d", rs.Attempt, attempt)
		}
		h.sync(running(rs.ID), exited(rs.ID, 3, ""))
	}
	failed := h.waitJob(j.ID, model.JobFailed)
	if failed.Attempts != 2 || failed.Failures != 2 || failed.ExitCode == nil || *failed.ExitCode != 3 {
		t.Fatalf("failed job = attempts %d failures %d exit %v", failed.Attempts, failed.Failures, failed.ExitCode)
	}
}

func TestRuntimeLimitFailsWithoutRetry(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 1)
	spec := cmdSpec(1)
	spec.Retries.Failures = 3
	spec.Limits.Runtime = model.Duration(time.Minute)
	j := h.submit(spec)
	rs := h.waitDesired(1).Replicas[0]
	if rs.Runtime != model.Duration(time.Minute) {
		t.Fatalf("replica runtime = %v, want 1m", rs.Runtime)
	}
	h.sync(running(rs.ID), exited(rs.ID, 143, model.ReasonRuntimeLimit))
	failed := h.waitJob(j.ID, model.JobFailed)
	if failed.Reason != model.ReasonRuntimeLimit || failed.Attempts != 1 {
		t.Fatalf("job = %s %q after %d attempts, want failed %q after 1", failed.State, failed.Reason, failed.Attempts, model.ReasonRuntimeLimit)
	}
}

func TestCancelStopsRunningReplica(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	if _, err := h.c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if got := h.sync().Replicas; len(got) != 1 || !got[0].Stop {
		t.Fatalf("desired after cancel = %+v, want the replica with Stop", got)
	}
	h.sync(exited(rs.ID, 143, agentapi.ReasonStopped))
	done := h.waitJob(j.ID, model.JobCancelled)
	if done.Reason != model.ReasonCancelled {
		t.Fatalf("reason = %q", done.Reason)
	}
	if _, err := h.c.Cancel(context.Background(), j.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("second cancel: %v, want conflict", err)
	}
}

func TestCancelQueuedJob(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	j := h.submit(cmdSpec(1)) // no nodes: stays queued
	got, err := h.c.Cancel(context.Background(), j.ID)
	if err != nil || got.State != model.JobCancelled {
		t.Fatalf("cancel queued = %v, %v", got, err)
	}
}

func TestLostReplicaRequeues(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(agentapi.ReplicaStatus{ID: rs.ID, Phase: agentapi.PhaseLost, Reason: model.ReasonLost})
	rs2 := h.waitDesired(1).Replicas[0]
	if rs2.Attempt != 2 {
		t.Fatalf("after a lost attempt the desired attempt is %d, want 2", rs2.Attempt)
	}
	atts, _ := h.c.Attempts(j.ID)
	if atts[0].State != model.AttemptLost {
		t.Fatalf("first attempt = %s, want lost", atts[0].State)
	}
	if jj, _ := h.c.Job(j.ID); jj.Preemptions != 1 {
		t.Fatalf("preemptions = %d, want 1", jj.Preemptions)
	}
}

func TestSilentNodeIsLost(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	clk.Advance(2 * time.Minute) // past the 1m heartbeat timeout; the ticker runs checkNodes
	h.waitJob(j.ID, model.JobQueued)
	nodes := h.c.Nodes()
	if nodes[0].State != model.NodeLost {
		t.Fatalf("node state = %s, want lost", nodes[0].State)
	}
}

func TestGangFailureStopsTheOtherReplicas(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 2)
	spec := cmdSpec(1)
	spec.Replicas = 2
	j := h.submit(spec)
	reps := h.waitDesired(2).Replicas
	h.sync(running(reps[0].ID), running(reps[1].ID), exited(reps[1].ID, 1, ""))
	after := h.sync().Replicas
	if len(after) != 1 || after[0].ID != reps[0].ID || !after[0].Stop {
		t.Fatalf("desired after rank 1 failed = %+v, want rank 0 stopping", after)
	}
	h.sync(exited(reps[0].ID, 143, agentapi.ReasonStopped))
	failed := h.waitJob(j.ID, model.JobFailed)
	if failed.ExitCode == nil || *failed.ExitCode != 1 {
		t.Fatalf("gang exit code = %v, want the failing rank's 1", failed.ExitCode)
	}
}

func TestIdempotentSubmission(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	spec := cmdSpec(0)
	spec.Default()
	sub := Submission{Project: "default", User: "alice", Spec: spec, IdempotencyKey: "k1", BodyHash: []byte("a")}
	first, created, err := h.c.Submit(context.Background(), sub)
	if err != nil || !created {
		t.Fatalf("first submit: %v created=%v", err, created)
	}
	again, created, err := h.c.Submit(context.Background(), sub)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("retry gave %v created=%v err=%v, want the first job", again, created, err)
	}
	sub.BodyHash = []byte("b")
	if _, _, err := h.c.Submit(context.Background(), sub); !errors.Is(err, ErrConflict) {
		t.Fatalf("reused key with another body: %v, want conflict", err)
	}
	sub.User = "bob"
	if other, created, err := h.c.Submit(context.Background(), sub); err != nil || !created || other.ID == first.ID {
		t.Fatalf("another user's key collided: %v %v", other, err)
	}
}

// TestRestartKeepsEverything restarts the controller on the same store:
// every job is there, the running attempt still holds its GPUs, and the
// agent's report of its exit after the restart completes the job.
func TestRestartKeepsEverything(t *testing.T) {
	st := newMemStore()
	h := newHarness(t, st, clock.NewFake(t0))
	node := h.register("", 2)
	runningJob := h.submit(cmdSpec(2))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(runningJob.ID, model.JobRunning)
	queued := h.submit(cmdSpec(1))
	h.stop()
	h.c.Close()

	h2 := newHarness(t, st, clock.NewFake(t0.Add(time.Hour)))
	h2.node = h2.register(node, 2)
	if j, err := h2.c.Job(queued.ID); err != nil || j.State != model.JobQueued {
		t.Fatalf("queued job after restart: %v %v", j, err)
	}
	desired := h2.sync().Replicas
	if len(desired) != 1 || desired[0].ID != rs.ID {
		t.Fatalf("desired after restart = %+v, want the running replica only", desired)
	}
	if desired[0].Env["GPUFLEET_JOB_TOKEN"] == "" {
		t.Fatal("no job token after restart")
	}
	h2.sync(exited(rs.ID, 0, ""))
	h2.waitJob(runningJob.ID, model.JobSucceeded)
	h2.waitJob(queued.ID, model.JobAdmitted)
}

// TestStaleBindingIsNotCommitted checks the per-object plan commit: a
// binding whose job or GPUs changed since the snapshot is dropped.
func TestStaleBindingIsNotCommitted(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	node := h.register("", 1)
	h.stop() // drive bindLocked by hand
	a := h.submit(cmdSpec(1))
	b := h.submit(cmdSpec(1))
	bind := func(id string, version uint64) bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		_, _, ok := h.c.bindLocked(scheduler.Binding{JobID: id, JobVersion: version, Replicas: []scheduler.Placement{{NodeID: node, GPUs: []int{0}}}})
		return ok
	}
	if bind(a.ID, a.Version+1) {
		t.Fatal("binding with a newer job version than the store's was committed")
	}
	if !bind(a.ID, a.Version) {
		t.Fatal("valid binding refused")
	}
	if bind(b.ID, b.Version) {
		t.Fatal("binding onto a GPU taken since the snapshot was committed")
	}
	if diff := cmp.Diff(model.JobAdmitted, mustJob(t, h.c, a.ID).State); diff != "" {
		t.Fatal(diff)
	}
}

func mustJob(t *testing.T, c *Controller, id string) *model.Job {
	t.Helper()
	j, err := c.Job(id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestCheckpointMarker: a job that writes $GPUFLEET_CHECKPOINT_DIR/LATEST has
// its checkpoint recorded, once per change of the marker.
func TestCheckpointMarker(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)

	marker := filepath.Join(rs.Env["GPUFLEET_CHECKPOINT_DIR"], "LATEST")
	if err := os.WriteFile(marker, []byte("step 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(-time.Minute)
	if err := os.Chtimes(marker, at, at); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		clk.Advance(time.Second) // the ticker drives watchCheckpoints
		got := mustJob(t, h.c, j.ID)
		if got.LastCheckpoint != nil {
			if !got.LastCheckpoint.Equal(at) {
				t.Fatalf("checkpoint recorded at %v, want the marker's time %v", got.LastCheckpoint, at)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("marker never recorded as a checkpoint")
		}
		h.await()
	}
	version := mustJob(t, h.c, j.ID).Version
	for range 3 {
		clk.Advance(time.Second)
		h.await()
	}
	if v := mustJob(t, h.c, j.ID).Version; v != version {
		t.Fatalf("an unchanged marker was recorded again (version %d → %d)", version, v)
	}
}
