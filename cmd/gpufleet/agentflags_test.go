package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentServerFlag: --server repeats and takes comma-separated lists,
// replacing GPUFLEET_SERVER; each URL is checked on its own.
func TestAgentServerFlag(t *testing.T) {
	cmd := exec.Command(binary, "agent", "--data-dir", t.TempDir(), "--token", "x",
		"--server", "http://a:1", "--server", "http://b:2,fleet:7777")
	cmd.Env = append(cleanEnv(), "GPUFLEET_SERVER=env:1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("agent started with a bad --server:\n%s", out)
	}
	if !strings.Contains(string(out), `--server: "fleet:7777" is not an http(s) URL`) || strings.Contains(string(out), "env:1") {
		t.Errorf("output does not refuse the third URL alone (or kept the environment's):\n%s", out)
	}
}
