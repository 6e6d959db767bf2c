package main

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestContainerJobs runs jobs with an image in podman containers: the job
// sees only its GPUs and its own two writable mounts, survives a kill -9
// of the server (re-adopted, run once), and a cancel reaches it as its
// checkpoint signal and removes its container.
func TestContainerJobs(t *testing.T) {
	if !podmanWorks(t) {
		t.Skip("needs rootful podman (.ci/run installs it)")
	}
	image := buildExampleImages(t)
	dataDir, listen := t.TempDir(), freePort(t)
	s := startServer(t, dataDir, listen)
	probe := `echo "gpus=$CUDA_VISIBLE_DEVICES host=$GPUFLEET_HOST_GPUS uid=$(id -u)"; ` +
		`grep ' /gpufleet' /proc/mounts | cut -d' ' -f2,4 | cut -d, -f1 | sort; ` +
		`touch /etc/x 2>/dev/null && echo ROOT-WRITABLE; exec /app/train.sh`
	long := strings.TrimSpace(s.gpufleet("run", "--image", image, "--gpus", "2", "--env", "STEPS=24", "--env", "STEP_SECONDS=0.5", "--", "sh", "-c", probe))
	s.waitJob(long, func(v api.JobView) bool { return v.State == model.JobRunning }, "started")
	v := s.job(long)
	replica := model.ReplicaID(model.AttemptID(long, 1), 0)
	container := "gpufleet-" + replica
	if out, err := exec.Command("podman", "container", "exists", container).CombinedOutput(); err != nil {
		t.Fatalf("no container %s for the running job: %v %s", container, err, out)
	}

	// The server dies; the container does not.
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	time.Sleep(time.Second) // let the job run on without any server
	if out, err := exec.Command("podman", "container", "exists", container).CombinedOutput(); err != nil {
		t.Fatalf("the container died with the server: %v %s", err, out)
	}
	s2 := startServer(t, dataDir, listen)
	done := s2.waitJob(long, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	logs := s2.gpufleet("jobs", "logs", long)
	if done.State != model.JobSucceeded || done.Attempts != 1 {
		t.Fatalf("job %s after %d attempts (%s); log:\n%s", done.State, done.Attempts, done.Reason, logs)
	}
	if n := strings.Count(logs, "resuming at step"); n != 1 || !strings.Contains(logs, "trained 24 steps") {
		t.Fatalf("the job started %d times or did not finish; log:\n%s", n, logs)
	}
	gpus := v.AttemptDetails[0].Replicas[0].GPUs
	wantGPUs := "gpus=0,1 host=" + joinInts(gpus)
	if !strings.Contains(logs, wantGPUs) || strings.Contains(logs, "uid=0\n") {
		t.Errorf("the container's GPU view or user: want %q and no uid 0; log:\n%s", wantGPUs, logs)
	}
	if !strings.Contains(logs, "/gpufleet rw\n/gpufleet/checkpoint rw\n") || strings.Contains(logs, "ROOT-WRITABLE") {
		t.Errorf("the container's writable mounts are not exactly its folder and checkpoint folder, read-only root; log:\n%s", logs)
	}

	// A cancel is the checkpoint signal, then the container goes.
	stopped := strings.TrimSpace(s2.gpufleet("run", "--image", image, "--gpus", "1", "--env", "STEPS=1000", "--env", "STEP_SECONDS=0.2", "--", "/app/train.sh"))
	s2.waitJob(stopped, func(v api.JobView) bool { return v.State == model.JobRunning }, "started")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s2.gpufleet("jobs", "logs", stopped), "step 2\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the job never reached step 2:\n%s", s2.gpufleet("jobs", "logs", stopped))
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded
	}
	s2.gpufleet("jobs", "cancel", stopped)
	end := s2.waitJob(stopped, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if logs := s2.gpufleet("jobs", "logs", stopped); end.State != model.JobCancelled || !strings.Contains(logs, "on SIGTERM") {
		t.Fatalf("cancelled job %s; log:\n%s", end.State, logs)
	}
	if err := exec.Command("podman", "container", "exists", "gpufleet-"+model.ReplicaID(model.AttemptID(stopped, 1), 0)).Run(); err == nil {
		t.Error("the cancelled job's container is still there")
	}
}

// TestImageJobsNeedAContainerRuntime: on a node without one an image job
// is not placed, never run on the host, and explain says why.
func TestImageJobsNeedAContainerRuntime(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t), "--container-runtime", "none")
	id := strings.TrimSpace(s.gpufleet("run", "--image", "localhost/gpufleet-example/app:1", "--gpus", "1", "--", "/app/train.sh"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := s.gpufleet("explain", id)
		if strings.Contains(out, "no container runtime") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain does not say the node lacks a container runtime:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond) // polling a separate process; bounded
	}
	if v := s.job(id); v.State != model.JobQueued || v.Attempts != 0 {
		t.Fatalf("the image job is %s after %d attempts; want queued, never started", v.State, v.Attempts)
	}
}

func joinInts(gpus []int) string {
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}
