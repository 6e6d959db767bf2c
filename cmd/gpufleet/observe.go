package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/notify"
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

// alertWebhook sends the controller's alerts to a webhook.
type alertWebhook struct{ w *notify.Webhook }

func (a alertWebhook) Notify(al controller.Alert) { a.w.Send("alert", al) }

// alertNotifier returns the webhook alerts go to, started on ctx, or nil
// when no URL is configured.
func alertNotifier(ctx context.Context, c *serverConfig, log *slog.Logger) (controller.Notifier, error) {
	if c.AlertWebhookURL == "" {
		return nil, nil
	}
	var secret []byte
	if c.AlertWebhookSecretFile != "" {
		b, err := os.ReadFile(c.AlertWebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("reading the alert webhook secret: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(b)))
	}
	w := notify.New(notify.Options{URL: c.AlertWebhookURL, Secret: secret, Logger: log.With("component", "alerts")})
	go w.Run(ctx)
	return alertWebhook{w}, nil
}
