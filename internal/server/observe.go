package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TelemetrySource picks what samples this machine's GPUs: demo GPUs get a
// simulated source (its readings say "simulated"), others the best of
// NVML, nvidia-smi and dcgm-exporter, or "none" on a machine without GPUs.
// sim is set for demo GPUs, whose Busy the caller wires to the agent.
func TelemetrySource(ctx context.Context, inv gpu.Inventory, log *slog.Logger) (src telemetry.Source, sim *telemetry.Simulated) {
	if inv.Source == gpu.SourceFake {
		sim = &telemetry.Simulated{}
		for _, g := range inv.GPUs {
			sim.GPUs = append(sim.GPUs, telemetry.SimGPU{Index: g.Index, UUID: g.UUID, MemoryMiB: float64(g.Memory / model.MiB)})
		}
		return sim, sim
	}
	if len(inv.GPUs) == 0 {
		return telemetry.None{}, nil
	}
	src = telemetry.Detect(ctx, telemetry.Options{Logger: log})
	log.Info("GPU telemetry", "source", src.Name())
	return src, nil
}

// DiscoverGPUs finds this machine's GPUs, or declares fake ones.
func DiscoverGPUs(ctx context.Context, fake string, cat *catalog.Catalog, log *slog.Logger) (gpu.Inventory, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	inv, err := gpu.Discover(dctx, gpu.Options{
		Fake: fake,
		MemoryOf: func(name string) (model.Bytes, bool) {
			a, ok := cat.Accelerator(name)
			return a.Memory, ok && a.Memory > 0
		},
		Logger: log,
	})
	if err != nil {
		return inv, fmt.Errorf("discovering GPUs: %w", err)
	}
	return inv, nil
}
