package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
)

// BenchmarkAgentSync is one agent's sync (8 GPU telemetry samples, no
// status change, no wait) against a fleet of 1,000 full eight-GPU nodes
// running 8,000 one-GPU attempts: the per-sync work an agent costs the
// server, which should not grow with the fleet. Every node has synced once
// before the timer (job tokens minted, checkpoint folders made).
func BenchmarkAgentSync(b *testing.B) {
	const nodes = 1000
	st := fullFleetStore(nodes, 1, 0, []string{"default"})
	logs, err := logstore.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(t0)
	c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: b.TempDir(), HeartbeatTimeout: time.Hour, PassGap: -1, Fatal: func(err error) { b.Errorf("fatal: %v", err) }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	req := func(i int) agentapi.SyncRequest {
		s := agentapi.TelemetrySample{Time: clk.Now()}
		for g := 0; g < 8; g++ {
			s.GPUs = append(s.GPUs, agentapi.GPUTelemetry{Index: g, UUID: fmt.Sprintf("GPU-%05d-%d", i, g),
				Values: map[string]float64{fieldSMActive: 0.8, "DCGM_FI_DEV_GPU_UTIL": 95, "DCGM_FI_DEV_FB_USED": 40000, "DCGM_FI_DEV_FB_TOTAL": 81559}})
		}
		return agentapi.SyncRequest{NodeID: fmt.Sprintf("n%05d", i), Telemetry: &agentapi.Telemetry{Source: "dcgm", Samples: []agentapi.TelemetrySample{s}}}
	}
	for i := 0; i < nodes; i++ {
		if resp, err := c.Sync(ctx, req(i)); err != nil || len(resp.Replicas) != 8 {
			b.Fatalf("node %d: %d replicas, %v", i, len(resp.Replicas), err)
		}
	}
	for i := 0; b.Loop(); i++ {
		if resp, err := c.Sync(ctx, req(i%nodes)); err != nil || len(resp.Replicas) != 8 {
			b.Fatalf("node %d: %d replicas, %v", i%nodes, len(resp.Replicas), err)
		}
	}
}
