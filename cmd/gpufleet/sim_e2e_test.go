package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// simJob counts to 40 in tenths of a second, keeping its step in the
// checkpoint dir, and on SIGTERM saves it and exits 143: it resumes where
// it stopped. Its first attempt runs until it is stopped, so the test
// never races the job.
const simJob = `n=$(cat "$GPUFLEET_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
echo "attempt $GPUFLEET_ATTEMPT resuming at step $n"
trap 'echo "checkpoint at step $n"; echo $n > "$GPUFLEET_CHECKPOINT_DIR/step"; exit 143' TERM
while [ $n -lt 40 ] || [ "$GPUFLEET_ATTEMPT" = 1 ]; do n=$((n+1)); echo $n > "$GPUFLEET_CHECKPOINT_DIR/step"; sleep 0.1; done
echo done`

// TestSimulatedClouds is README's "Simulated clouds" walkthrough against
// the real binary: an 8-GPU spot job launches a simulated node whose
// in-process agent runs it; a notice drains the node, the job is
// preempted, requeues onto a new node and finishes from its checkpoint.
func TestSimulatedClouds(t *testing.T) {
	t.Parallel()
	// At 600× a cloud's own notice lead (30 s on GCP) is 50 ms of wall
	// time: on a loaded machine the instance could stop before the agent
	// ships the job's last log lines. A 30-minute lead (3 s here) leaves
	// the checkpoint visible; boots stay scaled.
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	var lead strings.Builder
	lead.WriteString("clouds:\n")
	for _, c := range []string{"aws", "gcp", "azure", "oci", "lambda", "vast"} {
		lead.WriteString("  " + c + ": {noticeLead: 30m}\n")
	}
	if err := os.WriteFile(scenario, []byte(lead.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startControlPlane(t, t.TempDir(), freePort(t), "--sim", "--time-scale", "600", "--sim-scenario", scenario)
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "8", "--gpu", "H100", "--spot", "allowed", "--", "sh", "-c", simJob))

	// 1. A node launches, its agent registers and runs the job.
	s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	node := s.attemptNode(id)
	waitLog(t, s, id, 1, "resuming at step 0")
	waitFile(t, filepath.Join(checkpointRoot(s.dataDir), id, "step"))

	// 2. A notice drains the node: the job checkpoints, is preempted,
	// requeues onto another node and finishes where it stopped.
	s.gpufleet("nodes", "interrupt", node)
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded || v.Preemptions != 1 || v.Attempts != 2 {
		t.Fatalf("job %s, preemptions %d, attempts %d; want succeeded, 1, 2\nserver log:\n%s", v.State, v.Preemptions, v.Attempts, s.out)
	}
	if n := s.attemptNode(id); n == node {
		t.Errorf("attempt 2 ran on the interrupted node %s", node)
	}
	out := s.gpufleet("jobs", "logs", id, "--attempt", "2")
	m := regexp.MustCompile(`resuming at step (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("attempt 2 log:\n%s", out)
	}
	if step, _ := strconv.Atoi(m[1]); step == 0 {
		t.Errorf("attempt 2 started from scratch:\n%s", out)
	}
	if !strings.Contains(s.gpufleet("jobs", "logs", id, "--attempt", "1"), "checkpoint at step") {
		t.Errorf("attempt 1 never got its checkpoint signal")
	}

	// 3. The events tell the story.
	kinds := map[model.EventKind]int{}
	for _, e := range decodeItems[model.Event](t, s.gpufleet("events", "--limit", "1000", "-o", "json")) {
		kinds[e.Kind]++
	}
	for _, k := range []model.EventKind{model.EventLaunch, model.EventNodeReady, model.EventNotice, model.EventDrain, model.EventPreempted, model.EventRequeue, model.EventTerminate} {
		if kinds[k] == 0 {
			t.Errorf("no %s event; events by kind: %v", k, kinds)
		}
	}
	if kinds[model.EventLaunch] < 2 {
		t.Errorf("%d launches, want a second node after the notice", kinds[model.EventLaunch])
	}
}

// attemptNode is the node of the job's latest attempt's first replica.
func (s *serverProc) attemptNode(id string) string {
	s.t.Helper()
	v := s.job(id)
	if len(v.AttemptDetails) == 0 || len(v.AttemptDetails[len(v.AttemptDetails)-1].Replicas) == 0 {
		s.t.Fatalf("job %s has no placed attempt", id)
	}
	a := v.AttemptDetails[len(v.AttemptDetails)-1]
	return a.Replicas[0].NodeID
}

// waitLog waits until an attempt's output contains want.
func waitLog(t *testing.T, s *serverProc, id string, attempt int, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := s.gpufleetErr("jobs", "logs", id, "--attempt", strconv.Itoa(attempt))
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt %d of %s never printed %q:\n%s\nserver log:\n%s", attempt, id, want, out, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
}
