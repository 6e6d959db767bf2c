package main

import (
	"context"
	"log/slog"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/model"
)

// telemetrySource picks what samples this machine's GPUs: demo GPUs get a
// simulated source (its readings say "simulated"), others the best of
// NVML, nvidia-smi and dcgm-exporter, or "none" on a machine without GPUs.
// sim is set for demo GPUs, whose Busy the caller wires to the agent.
func telemetrySource(ctx context.Context, inv gpu.Inventory, log *slog.Logger) (src telemetry.Source, sim *telemetry.Simulated) {
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
