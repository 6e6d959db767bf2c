package telemetry_test

import (
	"context"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
)

func TestSimulatedBusyAndIdle(t *testing.T) {
	t.Parallel()
	src := &telemetry.Simulated{
		GPUs: []telemetry.SimGPU{{Index: 0, UUID: "GPU-fake-0", MemoryMiB: 81920}, {Index: 1, UUID: "GPU-fake-1", MemoryMiB: 81920}},
		Busy: func(i int) bool { return i == 1 },
	}
	s, err := src.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if src.Name() != telemetry.SourceSimulated {
		t.Errorf("Name = %q, want %q", src.Name(), telemetry.SourceSimulated)
	}
	if got := s.GPUs[0].Value(telemetry.SMActive); got != 0 {
		t.Errorf("idle GPU SM active = %v, want 0", got)
	}
	if got := s.GPUs[1].Value(telemetry.SMActive); got < 0.8 {
		t.Errorf("busy GPU SM active = %v, want ≥ 0.8", got)
	}
	if s.GPUs[1].Present.Has(telemetry.XID) {
		t.Error("a simulation reports XIDs")
	}
}
