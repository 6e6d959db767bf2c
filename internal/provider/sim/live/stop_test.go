package live

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
)

// TestSimStopAllEndsWorkloads: stopping the server stops what its simulated
// machines run — SIGTERM first, SIGKILL for what ignores it past the grace.
func TestStopAllEndsWorkloads(t *testing.T) {
	t.Parallel()
	type result struct{ Signalled, Killed int }
	for name, tc := range map[string]struct {
		script string
		want   result
	}{
		"exits on SIGTERM": {"echo ready; exec sleep 60", result{1, 0}},
		"ignores SIGTERM":  {"trap '' TERM; echo ready; sleep 60 & wait; sleep 60", result{1, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			cmd := exec.Command("sh", "-c", tc.script)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// "ready": the shell has set its trap before it is signalled.
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("workload said %q, %v", line, err)
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited })
			start, err := supervisor.ProcessStartTime(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(data, "sim", "sim-node-1", "replicas", "a-1-r0")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			pids, _ := json.Marshal(supervisor.PIDs{Child: &supervisor.Process{PID: cmd.Process.Pid, Start: start}})
			if err := os.WriteFile(filepath.Join(dir, supervisor.PIDFile), pids, 0o600); err != nil {
				t.Fatal(err)
			}
			s := &Nodes{dataDir: data, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			signalled, killed := s.StopAll(context.Background(), 300*time.Millisecond)
			if diff := cmp.Diff(tc.want, result{signalled, killed}); diff != "" {
				t.Fatalf("StopAll (-want +got):\n%s", diff)
			}
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Fatal("the workload still runs after StopAll")
			}
		})
	}
}
