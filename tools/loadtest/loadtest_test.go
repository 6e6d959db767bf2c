package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestRunTiny runs the harness at a tiny size against the real binary, so
// that it keeps working: every job is submitted, placed and succeeds,
// nothing runs twice, and the server's figures are read.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpufleet binary")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gpufleet")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpufleet")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building gpufleet: %v\n%s", err, out)
	}
	tests := map[string]Config{
		// 5 nodes × 8 GPUs hold 40 of the 50 jobs: the rest are placed
		// as the first exit, so placement waits for exits too.
		"virtual agents": {Nodes: 5, Jobs: 50, Clients: 8, JobDuration: 300 * time.Millisecond, TelemetryInterval: 100 * time.Millisecond},
		"local agent":    {Nodes: 0, Jobs: 5, Clients: 4},
		// Submission alone: every job stays queued.
		"submit only": {SubmitOnly: true, Jobs: 50, Clients: 8},
	}
	for name, c := range tests {
		t.Run(name, func(t *testing.T) {
			c.Binary, c.Timeout = bin, 2*time.Minute
			c.Log = testWriter{t}
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[int]int{201: c.Jobs}, res.SubmitStatuses); diff != "" {
				t.Errorf("submit statuses (-want +got):\n%s", diff)
			}
			if c.SubmitOnly {
				if res.FinalStates["queued"] != c.Jobs || res.Commits == 0 || res.BatchesPerCommit < 1 {
					t.Errorf("final states %v, %d commits of %.1f batches: want %d queued, committed", res.FinalStates, res.Commits, res.BatchesPerCommit, c.Jobs)
				}
				return
			}
			if res.FinalStates["succeeded"] != c.Jobs {
				t.Errorf("final states %v, want %d succeeded", res.FinalStates, c.Jobs)
			}
			if diff := cmp.Diff(DoubleRuns{}, res.DoubleRuns); diff != "" {
				t.Errorf("double runs (-want +got):\n%s", diff)
			}
			if res.PlacedAfterLastSubmit < 0 || res.SucceededAfterLastSubmit < res.PlacedAfterLastSubmit {
				t.Errorf("placed after %.2fs, succeeded after %.2fs", res.PlacedAfterLastSubmit, res.SucceededAfterLastSubmit)
			}
			if res.SubmitsPerSec <= 0 || res.SubmitP99ms < res.SubmitP50ms {
				t.Errorf("submits/s %.1f, p50 %.1f ms, p99 %.1f ms", res.SubmitsPerSec, res.SubmitP50ms, res.SubmitP99ms)
			}
			if res.ServerPeakRSSMB <= 0 || res.ServerCPUSeconds <= 0 {
				t.Errorf("server peak RSS %.1f MB, CPU %.2f s: /proc not read", res.ServerPeakRSSMB, res.ServerCPUSeconds)
			}
			var table strings.Builder
			res.WriteTable(&table)
			if !strings.Contains(table.String(), "double runs") {
				t.Errorf("table lacks the double runs row:\n%s", table.String())
			}
		})
	}
}

// TestTrackerDoubleRuns holds the tracker to its definition: two attempts
// of one job running at once, or one replica id started twice, count.
func TestTrackerDoubleRuns(t *testing.T) {
	spec := func(job string, attempt int) agentapi.ReplicaSpec {
		a := model.AttemptID(job, attempt)
		return agentapi.ReplicaSpec{ID: model.ReplicaID(a, 0), JobID: job, AttemptID: a, Attempt: attempt}
	}
	now := time.Now()
	tr := newTracker(3)
	// j1: attempt 1 ends, then attempt 2 runs: a requeue, not a double run.
	tr.started(spec("j1", 1), now)
	tr.stopped(spec("j1", 1))
	tr.started(spec("j1", 2), now)
	// j2: attempt 2 starts while attempt 1 still runs.
	tr.started(spec("j2", 1), now)
	tr.started(spec("j2", 2), now)
	// j3: the same replica id started twice (by two agents).
	tr.started(spec("j3", 1), now)
	tr.started(spec("j3", 1), now)
	got := map[string]any{"jobs": tr.doubleJobs, "twice": tr.twice, "placed": len(tr.placedAt)}
	want := map[string]any{"jobs": map[string]bool{"j2": true}, "twice": 1, "placed": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	select {
	case <-tr.allPlaced:
	default:
		t.Error("allPlaced not closed after 3 of 3 jobs")
	}
}

func TestAttemptsOverlap(t *testing.T) {
	at := func(s int) *time.Time { v := time.Unix(int64(s), 0); return &v }
	tests := map[string]struct {
		atts []*model.Attempt
		want bool
	}{
		"one attempt":             {[]*model.Attempt{{StartedAt: at(1)}}, false},
		"second after first end":  {[]*model.Attempt{{StartedAt: at(1), EndedAt: at(5)}, {StartedAt: at(6)}}, false},
		"second before first end": {[]*model.Attempt{{StartedAt: at(1), EndedAt: at(7)}, {StartedAt: at(6)}}, true},
		"first never ended":       {[]*model.Attempt{{StartedAt: at(1)}, {StartedAt: at(6)}}, true},
		"first never started":     {[]*model.Attempt{{}, {StartedAt: at(6)}}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := attemptsOverlap(tc.atts); got != tc.want {
				t.Errorf("attemptsOverlap = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseJobCounts(t *testing.T) {
	in := "# HELP gpufleet_jobs Jobs by state.\n# TYPE gpufleet_jobs gauge\n" +
		"gpufleet_jobs{state=\"queued\"} 12\ngpufleet_jobs{state=\"succeeded\"} 3\ngpufleet_jobs_submitted_total 15\n"
	got, err := parseJobCounts(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"queued": 12, "succeeded": 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
