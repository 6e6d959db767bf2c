package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecondServerOnOneDataDir: a second server on a data dir in use is
// refused at once, naming the first one's pid, and leaves the first one's
// server.json and service alone.
func TestSecondServerOnOneDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, dir, freePort(t))
	info, err := os.ReadFile(filepath.Join(dir, serverFile))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, binary, "up", "--data-dir", dir, "--listen", freePort(t), "--fake-gpus", "1xH100")
	second.Env = cleanEnv()
	out, err := second.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("second server still running after 20s, want it refused:\n%s", out)
	}
	if err == nil {
		t.Fatalf("second server exited 0, want it refused:\n%s", out)
	}
	if want := fmt.Sprintf("in use by another gpufleet server (pid %d)", first.cmd.Process.Pid); !strings.Contains(string(out), want) {
		t.Fatalf("second server said:\n%s\nwant it to say %q", out, want)
	}
	after, err := os.ReadFile(filepath.Join(dir, serverFile))
	if err != nil || string(after) != string(info) {
		t.Fatalf("server.json after the second server = %q, %v; want the first one's %q", after, err, info)
	}
	first.gpufleet("nodes", "list")
}
