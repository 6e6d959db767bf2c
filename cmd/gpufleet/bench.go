package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/advisor"
	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/server"
)

// benchScript measures GPU 0 with PyTorch: a bf16 matmul's rate and a
// device-to-device copy's bandwidth (bytes read plus written), timed with
// CUDA events after a warm-up. It prints one JSON object.
const benchScript = `
import json, torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
d = torch.device("cuda:0")
n = 8192
a = torch.randn(n, n, device=d, dtype=torch.bfloat16)
b = torch.randn(n, n, device=d, dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
iters = 20
s.record()
for _ in range(iters): a @ b
e.record(); torch.cuda.synchronize()
tflops = 2 * n**3 * iters / (s.elapsed_time(e) / 1e3) / 1e12
x = torch.empty(1 << 28, device=d, dtype=torch.float32)  # 1 GiB
y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
s.record()
for _ in range(iters): y.copy_(x)
e.record(); torch.cuda.synchronize()
gbs = 2 * x.numel() * 4 * iters / (s.elapsed_time(e) / 1e3) / 1e9
print(json.dumps({"bf16TFLOPS": tflops, "memoryBandwidthGBs": gbs, "device": torch.cuda.get_device_name(0)}))
`

// benchReport is what bench prints.
type benchReport struct {
	GPU      string           `json:"gpu"`
	Count    int              `json:"count"`
	Memory   model.Bytes      `json:"memory"`
	Measured advisor.Measured `json:"measured"`
	// Datasheet figures for comparison.
	DatasheetBF16TFLOPS float64 `json:"datasheetBF16TFLOPS,omitempty"`
	DatasheetGBs        float64 `json:"datasheetMemoryBandwidthGBs,omitempty"`
	Stored              string  `json:"stored,omitempty"`
	Note                string  `json:"note,omitempty"`
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		out, python string
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure this node's GPU (bf16 matmul, memory bandwidth) for the advisor",
		Long: `Measure what this machine's GPU really delivers and store it for 'gpufleet advise',
which then uses the measured rates for that GPU model instead of datasheet ones.

With python3 and PyTorch (CUDA) installed, a short script times a bf16 8192³
matmul and a 1 GiB device copy on GPU 0 (about 10 seconds). Without them, only
nvidia-smi's facts are shown and nothing is stored. On a machine without an
NVIDIA GPU, bench says so and exits with status 1.

Results are stored per GPU model in <data-dir>/calibration.json.`,
		Example: `  gpufleet bench
  gpufleet bench --python /opt/venv/bin/python -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			inv, err := gpu.Discover(ctx, gpu.Options{})
			if err != nil {
				return fmt.Errorf("finding GPUs: %w", err)
			}
			if len(inv.GPUs) == 0 {
				return errors.New("no NVIDIA GPU on this machine (nvidia-smi is missing or lists none): nothing to measure; run gpufleet bench on a GPU node")
			}
			first := inv.GPUs[0]
			rep := benchReport{GPU: first.Model, Memory: first.Memory}
			for _, gg := range inv.GPUs {
				if gg.Model == first.Model {
					rep.Count++
				}
			}
			if cat, err := catalog.Load(); err == nil {
				if acc, ok := cat.Accelerator(first.Model); ok {
					rep.DatasheetBF16TFLOPS, rep.DatasheetGBs = acc.BF16TFLOPS, acc.MemoryBandwidthGBs
				}
			}
			m, err := runBenchScript(ctx, python)
			switch {
			case errors.Is(err, exec.ErrNotFound) || errors.Is(err, errNoTorch):
				rep.Note = fmt.Sprintf("nvidia-smi facts only: %v; install python3 with PyTorch (CUDA) to measure rates; nothing stored", err)
			case err != nil:
				return fmt.Errorf("measuring %s: %w", first.Model, err)
			default:
				host, _ := os.Hostname()
				m.MeasuredAt, m.Host = time.Now().UTC().Format(time.RFC3339), host
				rep.Measured = m
				path, err := storeCalibration(g.dataDir, first.Model, m)
				if err != nil {
					return err
				}
				rep.Stored = path
			}
			return render(cmd.OutOrStdout(), out, rep, func(tw *tabwriter.Writer) {
				row(tw, "GPU", fmt.Sprintf("%d×%s (%s each)", rep.Count, rep.GPU, rep.Memory))
				if rep.Measured.BF16TFLOPS > 0 {
					row(tw, "bf16 matmul", fmt.Sprintf("%.1f TFLOP/s (datasheet %.0f)", rep.Measured.BF16TFLOPS, rep.DatasheetBF16TFLOPS))
					row(tw, "memory bandwidth", fmt.Sprintf("%.0f GB/s (datasheet %.0f)", rep.Measured.MemoryBandwidthGBs, rep.DatasheetGBs))
					row(tw, "stored in", rep.Stored)
				}
				if rep.Note != "" {
					row(tw, "note", rep.Note)
				}
			})
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().StringVar(&python, "python", "python3", "the Python interpreter with PyTorch")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

// errNoTorch means python runs but cannot use PyTorch with CUDA.
var errNoTorch = errors.New("python3 has no PyTorch with CUDA")

// runBenchScript runs the measuring script and decodes its result.
func runBenchScript(ctx context.Context, python string) (advisor.Measured, error) {
	var m advisor.Measured
	if _, err := exec.LookPath(python); err != nil {
		return m, fmt.Errorf("%s: %w", python, exec.ErrNotFound)
	}
	if err := exec.CommandContext(ctx, python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)").Run(); err != nil {
		return m, errNoTorch
	}
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, python, "-c", benchScript)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return m, fmt.Errorf("the benchmark script failed: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var got struct {
		TFLOPS float64 `json:"bf16TFLOPS"`
		GBs    float64 `json:"memoryBandwidthGBs"`
		Device string  `json:"device"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &got); err != nil || got.TFLOPS <= 0 || got.GBs <= 0 {
		return m, fmt.Errorf("the benchmark script printed %q, not its result", stdout.String())
	}
	m.BF16TFLOPS, m.MemoryBandwidthGBs = got.TFLOPS, got.GBs
	m.Method = "torch bf16 matmul 8192³ and 1 GiB device copy on " + got.Device
	return m, nil
}

// storeCalibration merges one GPU model's measurement into the data dir's
// calibration file, replacing it atomically.
func storeCalibration(dataDir, gpuModel string, m advisor.Measured) (string, error) {
	cal, _, err := server.LoadCalibration(dataDir)
	if err != nil {
		return "", err
	}
	if cal.GPUs == nil {
		cal.GPUs = map[string]advisor.Measured{}
	}
	cal.GPUs[gpuModel] = m
	data, err := json.MarshalIndent(cal, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("storing calibration: %w", err)
	}
	path := filepath.Join(dataDir, server.CalibrationFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("storing calibration: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("storing calibration: %w", err)
	}
	return path, nil
}
