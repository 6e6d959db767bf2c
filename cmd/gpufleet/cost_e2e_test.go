package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestEarlyStopPlateau is issue 6's done-when: a job reporting a flat loss
// with `gpufleet metric` is stopped after the patience window, gets its
// checkpoint signal, writes its checkpoint and ends stopped-early with the
// reason.
func TestEarlyStopPlateau(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t))
	// The job finds `gpufleet` on its PATH, as it would on a node.
	script := `trap 'echo saved > "$GPUFLEET_CHECKPOINT_DIR/ckpt"; exit 0' TERM
i=0
while [ $i -lt 200 ]; do
  gpufleet metric --step $i loss=1.0 || exit 3
  i=$((i+1))
  sleep 0.2 & wait $!
done
exit 4`
	job := map[string]any{
		"apiVersion": "gpufleet.dev/v1",
		"kind":       "Job",
		"metadata":   map[string]any{"name": "flat-loss"},
		"spec": map[string]any{
			"resources":  map[string]any{"gpus": 0},
			"run":        map[string]any{"command": []string{"sh", "-c", script}, "env": map[string]string{"PATH": filepath.Dir(binary) + ":" + os.Getenv("PATH")}},
			"checkpoint": map[string]any{"signal": "SIGTERM", "grace": "20s"},
			"earlyStop":  map[string]any{"policy": "plateau", "metric": "loss", "patience": 3, "minDelta": 0.01, "mode": "stop"},
		},
	}
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(sharedDir(t), "job.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(s.gpufleet("run", "-f", file))
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobStoppedEarly || !strings.Contains(v.Reason, "early stop: loss has not improved") {
		t.Fatalf("job = %s %q, want stopped-early by the plateau policy\nlogs:\n%s", v.State, v.Reason, s.gpufleet("jobs", "logs", id))
	}
	// The checkpoint folder's layout is the controller's; find the file.
	var ckpt []string
	_ = filepath.WalkDir(filepath.Join(checkpointRoot(s.dataDir), id), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "ckpt" && strings.Contains(p, id) {
			ckpt = append(ckpt, p)
		}
		return nil
	})
	if len(ckpt) != 1 {
		t.Fatalf("no checkpoint file written under %s for %s\nlogs:\n%s", checkpointRoot(s.dataDir), id, s.gpufleet("jobs", "logs", id))
	}
	if got, _ := os.ReadFile(ckpt[0]); string(got) != "saved\n" {
		t.Fatalf("checkpoint %s = %q", ckpt[0], got)
	}
	// Outside a job, `gpufleet metric` says where it runs.
	out, err := s.gpufleetErr("metric", "--step", "1", "loss=1")
	if err == nil || !strings.Contains(out, "runs inside a gpufleet job") {
		t.Fatalf("metric outside a job = %v %q, want a clear error", err, out)
	}
	// jobs get shows what the run cost (demo GPUs are priced from the catalog).
	if got := s.gpufleet("jobs", "get", id); !strings.Contains(got, "Cost:") && v.Cost != nil {
		t.Fatalf("jobs get has no cost line:\n%s", got)
	}
	// The cost commands answer against a live server.
	if got := s.gpufleet("cost", "--window", "1d", "--by", "project,tag:team", "--include-idle"); !strings.Contains(got, "PROJECT") || !strings.Contains(got, "TOTAL") {
		t.Errorf("cost table:\n%s", got)
	}
	if got := s.gpufleet("cost", "--by", "project", "-o", "csv"); !strings.HasPrefix(got, "start,project,cost,") {
		t.Errorf("cost csv:\n%s", got)
	}
	if got := s.gpufleet("budgets", "list"); !strings.HasPrefix(got, "NAME") {
		t.Errorf("budgets list:\n%s", got)
	}
	s.gpufleet("cost", "forecast", "-o", "json")
	s.gpufleet("cost", "purchase", "--lookback", "7d")
}
