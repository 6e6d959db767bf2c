package agent

import (
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
