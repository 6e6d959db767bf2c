package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// storageJob keeps its step and weights in the checkpoint folder, marking
// each checkpoint with LATEST (every 5 steps, and on SIGTERM before it
// exits 143). Its first attempt runs until stopped.
const storageJob = `d=$GPUFLEET_CHECKPOINT_DIR
n=$(sed 's/step=//' "$d/LATEST" 2>/dev/null || echo 0)
echo "attempt $GPUFLEET_ATTEMPT resuming at step $n from $(cat "$d/model.bin" 2>/dev/null)"
save() { echo "weights-of-step-$n" > "$d/model.bin"; echo "step=$n" > "$d/LATEST"; }
trap 'save; echo "checkpoint at step $n"; exit 143' TERM
while [ $n -lt 40 ] || [ "$GPUFLEET_ATTEMPT" = 1 ]; do n=$((n+1)); [ $((n % 5)) = 0 ] && save; sleep 0.1; done
echo done`

// TestCheckpointsFollowTheJobThroughObjectStorage is issue 17's done-when
// against the real binary and versitygw: a spot job on a simulated pool
// whose checkpointStorage is an S3 bucket checkpoints on node A; A gets a
// notice; the job's last checkpoint (written on SIGTERM) is uploaded before
// the attempt ends, and the next attempt, on node B in a folder of its own,
// resumes from it. The bucket's raw files hold no plaintext of it.
func TestCheckpointsFollowTheJobThroughObjectStorage(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	raw := srv.CreateBucket(t, "ckpt")
	scenario := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := os.WriteFile(scenario, []byte("clouds:\n  aws: {noticeLead: 30m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startControlPlane(t, t.TempDir(), freePort(t), "--sim", "--sim-clouds", "aws", "--time-scale", "600", "--sim-scenario", scenario)
	set := s.gpufleetCmd("secrets", "set", "default", "S3_CKPT")
	set.Stdin = strings.NewReader(s3test.AccessKey + ":" + s3test.SecretKey)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("secrets set: %v\n%s", err, out)
	}
	pool := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(pool, []byte(fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: spot-h100}
spec:
  provider: sim
  sim: {clouds: [aws]}
  requirements: {gpuModels: [H100], gpusPerNode: 8}
  capacityTypes: [spot]
  min: 0
  max: 3
  checkpointStorage:
    s3: {bucket: ckpt, prefix: fleet, endpoint: %q, pathStyle: true, credentialsRef: default/S3_CKPT}
`, srv.Endpoint)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", pool)
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "8", "--gpu", "H100", "--spot", "allowed", "--", "sh", "-c", storageJob))

	// 1. Node A runs it; a checkpoint reaches the bucket.
	s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	nodeA := s.attemptNode(id)
	waitLog(t, s, id, 1, "resuming at step 0")
	deadline := time.Now().Add(30 * time.Second)
	for !hasFile(raw, "latest") {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint reached the bucket\nserver log:\n%s", s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process's upload; bounded by the deadline
	}

	// 2. A notice: the job checkpoints on SIGTERM, is preempted and
	// resumes on node B from exactly that checkpoint.
	s.gpufleet("nodes", "interrupt", nodeA)
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded || v.Preemptions != 1 || v.Attempts != 2 {
		t.Fatalf("job %s, preemptions %d, attempts %d; want succeeded, 1, 2\nserver log:\n%s", v.State, v.Preemptions, v.Attempts, s.out)
	}
	if n := s.attemptNode(id); n == nodeA {
		t.Errorf("attempt 2 ran on the interrupted node %s", nodeA)
	}
	first := regexp.MustCompile(`checkpoint at step (\d+)`).FindStringSubmatch(s.gpufleet("jobs", "logs", id, "--attempt", "1"))
	second := s.gpufleet("jobs", "logs", id, "--attempt", "2")
	if first == nil {
		t.Fatalf("attempt 1 never checkpointed on its notice")
	}
	if want := fmt.Sprintf("attempt 2 resuming at step %s from weights-of-step-%s\n", first[1], first[1]); !strings.HasPrefix(second, want) {
		t.Errorf("attempt 2 began %q, want %q", firstLine(second), want)
	}
	if v.LastCheckpoint == nil {
		t.Error("the job records no checkpoint")
	}

	// 3. The checkpoints are artefacts: listed with their steps, and the
	// one written on the notice fetched by its step, verified.
	steps := map[string]bool{}
	for _, a := range decodeItems[model.Artifact](t, s.gpufleet("artifacts", "list", "--job", id, "-o", "json")) {
		if a.Kind == model.ArtifactCheckpoint && a.Job == id {
			steps[strconv.FormatInt(a.Step, 10)] = true
		}
	}
	// Attempt 2 runs on to step 40 and checkpoints when it ends; a notice
	// after step 40 leaves the notice's step the last.
	last := "40"
	if n, _ := strconv.Atoi(first[1]); n >= 40 {
		last = first[1]
	}
	if !steps[first[1]] || !steps[last] {
		t.Errorf("artifacts list shows steps %v; want %s (the notice's) and %s (the last)", steps, first[1], last)
	}
	got := filepath.Join(t.TempDir(), "ckpt")
	s.gpufleet("artifacts", "get", id, "--step", first[1], "-o", got)
	if b, err := os.ReadFile(filepath.Join(got, "model.bin")); err != nil || string(b) != "weights-of-step-"+first[1]+"\n" {
		t.Errorf("artifacts get --step %s: model.bin %q, %v", first[1], b, err)
	}

	// 4. The bucket holds ciphertext under opaque names.
	filepath.WalkDir(raw, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, _ := os.ReadFile(p)
		for _, w := range []string{"weights-of-step", "step=", "model.bin", id} {
			if bytes.Contains(data, []byte(w)) || strings.Contains(p, w) {
				t.Errorf("bucket file %s reveals %q", p, w)
			}
		}
		return nil
	})
}

// hasFile reports whether a file named name lies under root.
func hasFile(root, name string) bool {
	found := false
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == name && e.Type().IsRegular() {
			found = true
		}
		return nil
	})
	return found
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
