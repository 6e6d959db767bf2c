package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// telemetrySeen returns every sample the server has received.
func (f *fakeControlPlane) telemetrySeen() (source string, samples []agentapi.TelemetrySample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.syncs {
		if s.Telemetry != nil {
			source = s.Telemetry.Source
			samples = append(samples, s.Telemetry.Samples...)
		}
	}
	return source, samples
}

// Samples of the agent's source ride on syncs, by DCGM field name, each
// delivered once.
func TestTelemetryShipsWithSyncs(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	src := &telemetry.Simulated{GPUs: []telemetry.SimGPU{{Index: 0, UUID: "GPU-fake-0", MemoryMiB: 81920}}}
	a := newTestAgent(t, cp, agentDir(t), func(c *Config) {
		c.Telemetry = src
		c.TelemetryInterval = 20 * time.Millisecond
		c.SyncWait = 30 * time.Millisecond
	})
	src.Busy = a.BusyGPU
	stop := startAgent(t, a)
	deadline := time.Now().Add(testTimeout)
	for {
		source, samples := cp.telemetrySeen()
		if len(samples) >= 3 {
			stop()
			if source != telemetry.SourceSimulated {
				t.Errorf("source = %q", source)
			}
			seen := map[time.Time]bool{}
			for _, s := range samples {
				if seen[s.Time] {
					t.Errorf("sample at %v delivered twice", s.Time)
				}
				seen[s.Time] = true
				if _, ok := s.GPUs[0].Values["DCGM_FI_PROF_SM_ACTIVE"]; !ok || s.GPUs[0].UUID != "GPU-fake-0" {
					t.Errorf("sample GPU = %+v", s.GPUs[0])
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d samples", len(samples))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A machine without GPUs reports "none" and nothing else.
func TestNoGPUReportsNone(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	a := newTestAgent(t, cp, agentDir(t), func(c *Config) {
		c.Telemetry = telemetry.None{}
		c.TelemetryInterval = 20 * time.Millisecond
		c.SyncWait = 30 * time.Millisecond
	})
	stop := startAgent(t, a)
	deadline := time.Now().Add(testTimeout)
	for cp.syncCount() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no syncs")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	source, samples := cp.telemetrySeen()
	if source != telemetry.SourceNone {
		t.Errorf("source = %q, want none", source)
	}
	for _, s := range samples {
		if len(s.GPUs) != 0 {
			t.Errorf("sample with GPUs: %+v", s)
		}
	}
}

// BenchmarkTelemetryCycle8GPUs is the agent's work per sampling interval
// beyond reading the GPUs: converting a sample of 8 GPUs to its wire form,
// queueing it, and encoding it into a sync. Divided by the interval (5s)
// it is the agent's steady telemetry overhead.
func BenchmarkTelemetryCycle8GPUs(b *testing.B) {
	src := &telemetry.Simulated{Busy: func(int) bool { return true }}
	for i := range 8 {
		src.GPUs = append(src.GPUs, telemetry.SimGPU{Index: i, UUID: "GPU-fake-" + string(rune('0'+i)), MemoryMiB: 81920})
	}
	a := &Agent{cfg: Config{Telemetry: src}}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		s, _ := src.Sample(ctx)
		s.Time = time.Unix(int64(len(a.samples)), 0)
		a.queueSample(s)
		t := a.telemetryRequest()
		if _, err := json.Marshal(agentapi.SyncRequest{NodeID: "n", Telemetry: t}); err != nil {
			b.Fatal(err)
		}
		a.telemetryDelivered(t)
	}
}
