package live

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestSimNodeTelemetry: a simulated instance's agent reports simulated
// telemetry on its fake GPUs, busy where a replica holds a GPU and idle
// elsewhere, so `jobs top` shows SM activity and a class for sim jobs.
func TestSimNodeTelemetry(t *testing.T) {
	t.Parallel()
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := &Nodes{ctx: context.Background(), dataDir: t.TempDir(), cat: cat, log: slog.New(slog.NewTextHandler(io.Discard, nil)), gpus: launchedGPUs}
	n := &model.Node{ID: "n-sim1", Name: "p5.48xlarge", Provider: "sim", Labels: map[string]string{"gpufleet.dev/gpus": "2", "gpufleet.dev/gpu-model": "H100"}}
	cfg, simTel, err := s.agentConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Telemetry == nil || simTel == nil {
		t.Fatalf("no telemetry source for a simulated node (telemetry %v)", cfg.Telemetry)
	}
	simTel.Busy = func(i int) bool { return i == 0 }
	sample, err := cfg.Telemetry.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type gpuView struct {
		UUID string
		Busy bool
	}
	var got, want []gpuView
	for _, g := range cfg.Registration.GPUs {
		want = append(want, gpuView{g.UUID, g.Index == 0})
	}
	for _, g := range sample.GPUs {
		sm, ok := g.Get(telemetry.SMActive)
		got = append(got, gpuView{g.UUID, ok && sm > 0.5})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sampled GPUs (-registered +sampled)\n%s", diff)
	}
	if diff := cmp.Diff(telemetry.SourceSimulated, cfg.Telemetry.Name()); diff != "" {
		t.Errorf("source (-want +got)\n%s", diff)
	}
}

// launchedGPUs reads the labels the scale loop sets, as
// controller.LaunchedGPUs does.
func launchedGPUs(n *model.Node) (int, string) {
	k, _ := strconv.Atoi(n.Labels["gpufleet.dev/gpus"])
	return k, n.Labels["gpufleet.dev/gpu-model"]
}
