package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/advisor"
)

// cli runs the binary without a server, with dataDir as its data dir and
// PATH limited to path (to hide or show nvidia-smi and python3).
func cli(t *testing.T, dataDir, path string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--data-dir", dataDir}, args...)...)
	cmd.Env = append(cleanEnv(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("running gpufleet %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

func TestAdviseCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := map[string]struct {
		args     []string
		wantCode int
		want     []string
	}{
		"walkthrough table": {
			args: []string{"advise", "--preset", "llama-2-70b", "--task", "full-finetune", "--tokens", "1e8", "--gpu", "a100,A100-80GB",
				"--provider", "aws", "--parallelism", "data", "--on-demand", "--region", "us-east-1", "--limit", "2", "--explain"},
			want: []string{"p4d.24xlarge", "64×A100", "zero3 full-recompute", "memory per GPU", "optimizer + fp32 grads", "assumptions:"},
		},
		"plan prints the pinned walkthrough": {
			args: []string{"advise", "--preset", "llama-2-70b", "--task", "full-finetune", "--tokens", "1e8", "--gpu", "A100",
				"--provider", "aws", "--parallelism", "data", "--num-gpus", "64", "--sharding", "full-shard", "--recompute", "full", "--plan"},
			want: []string{"plan: tp1 pp1 dp64 zero3 full-recompute", "zero3: 4·largest_layer_params", "korthikanti full recompute", "compute per step"},
		},
		"pins that fit no offer say why": {
			args: []string{"advise", "--preset", "llama-2-7b", "--task", "full-finetune", "--tokens", "1e8", "--instance-type", "p4d.24xlarge", "--num-gpus", "3", "--plan"},
			want: []string{"no offer matches the pinned plan (gpus 3)"},
		},
		"bad pins name the field": {
			args: []string{"advise", "--preset", "llama-2-7b", "--task", "full-finetune", "--tokens", "1e8", "--tp", "3", "--zero", "3", "--pp", "2"}, wantCode: 1,
			want: []string{"profile.pin.tp", "profile.pin.zero"},
		},
		"a given price replaces the listed one": {
			args: []string{"advise", "--preset", "llama-2-7b", "--task", "full-finetune", "--tokens", "1e8", "--instance-type", "p4d.24xlarge",
				"--on-demand", "--price-per-gpu-hour", "2", "--limit", "1"},
			want: []string{"$16.00", "price given: $2 per GPU-hour"},
		},
		"a negative price names the field": {
			args: []string{"advise", "--preset", "llama-2-7b", "--task", "full-finetune", "--tokens", "1e8", "--price-per-gpu-hour", "-1"}, wantCode: 1,
			want: []string{"pricePerGPUHour: must be between 0 and 10000"},
		},
		"serving": {
			args: []string{"advise", "--preset", "llama-3-70b", "--task", "serving", "--input-tokens", "1000", "--output-tokens", "200", "--concurrency", "32", "--limit", "3"},
			want: []string{"$/MTOK", "replica"},
		},
		"fits nowhere": {
			args: []string{"advise", "--preset", "llama-3.1-405b", "--task", "full-finetune", "--tokens", "1e9", "--gpu", "T4", "--max-nodes", "1"},
			want: []string{"no offer fits", "short by"},
		},
		"invalid profile names the field": {
			args: []string{"advise", "--layers", "0", "--hidden", "100", "--heads", "3", "--vocab", "10", "--task", "pretrain", "--tokens", "1"}, wantCode: 1,
			want: []string{"profile.model.heads: 3 heads do not divide hidden size 100", "profile.model.layers"},
		},
		"unknown preset": {
			args: []string{"advise", "--preset", "gpt-9", "--task", "lora", "--tokens", "1"}, wantCode: 1,
			want: []string{`profile.preset: unknown preset "gpt-9"`},
		},
		"bench without a GPU": {
			args: []string{"bench"}, wantCode: 1,
			want: []string{"no NVIDIA GPU on this machine"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, code := cli(t, dir, t.TempDir(), tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestAdviseFileAndCalibration reads a request file, overrides a field with
// a flag, and uses a stored calibration.
func TestAdviseFileAndCalibration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "workload.yaml")
	doc := "profile:\n  preset: llama-2-7b\n  task: full-finetune\n  tokens: 1.0e+8\ngpus: [H100]\nproviders: [aws]\ncapacity: [on-demand]\nlimit: 1\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func() advisor.Result {
		out, code := cli(t, dir, t.TempDir(), "advise", "-f", file, "--tokens", "2e8", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		var res advisor.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		return res
	}
	before := run()
	if before.Workload.Tokens != 2e8 || len(before.Rows) != 1 {
		t.Fatalf("tokens %g rows %d: the flag did not override the file", before.Workload.Tokens, len(before.Rows))
	}
	cal := `{"gpus":{"H100":{"bf16TFLOPS":300,"memoryBandwidthGBs":3000,"method":"test"}}}`
	if err := os.WriteFile(filepath.Join(dir, "calibration.json"), []byte(cal), 0o600); err != nil {
		t.Fatal(err)
	}
	after := run()
	if after.Rows[0].Hours <= before.Rows[0].Hours {
		t.Errorf("a slow measured H100 did not lengthen the estimate: %.2fh → %.2fh", before.Rows[0].Hours, after.Rows[0].Hours)
	}
	if !strings.Contains(strings.Join(after.Assumptions, "\n"), "calibration read from") {
		t.Errorf("assumptions do not name the calibration: %q", after.Assumptions)
	}
}
