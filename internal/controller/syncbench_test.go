package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
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

// BenchmarkSubmitWhileAgentsWait is one submission while the agents of
// 1,000 full nodes long-poll for a change of their desired set (as
// between their heartbeats): a submission changes no node's set, so it
// should cost the same whether 1 or 1,000 agents wait. cpu-µs/op is the
// process's CPU per submission, the waiting agents' wake-ups included;
// submissions come a millisecond apart (as over HTTP, where they arrive at
// hundreds to thousands a second), so what one wakes runs before the next.
func BenchmarkSubmitWhileAgentsWait(b *testing.B) {
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, nodes)
	for i := 0; i < nodes; i++ {
		id := fmt.Sprintf("n%05d", i)
		resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: id})
		if err != nil {
			b.Fatal(err)
		}
		go func(gen uint64) {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				r, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: id, Generation: gen, Wait: model.Duration(time.Hour)})
				if err != nil {
					return
				}
				gen = r.Generation
			}
		}(resp.Generation)
	}
	time.Sleep(100 * time.Millisecond) // let every agent reach its wait
	spec := cmdSpec(1)
	spec.Default()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := c.Submit(ctx, Submission{Project: "default", User: "bench", Spec: spec}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	cancel()
	for i := 0; i < nodes; i++ {
		<-done
	}
}
