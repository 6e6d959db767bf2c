package telemetry

import (
	"context"
	"math"
)

// SourceSimulated names the source of demo GPUs (--fake-gpus).
const SourceSimulated = "simulated"

// SimGPU is one demo GPU a Simulated source reports.
type SimGPU struct {
	Index int
	UUID  string
	// MemoryMiB is the GPU's framebuffer.
	MemoryMiB float64
}

// Simulated reports made-up readings for demo GPUs, so that a demo node
// shows telemetry; its Name says "simulated" so nobody mistakes them for
// measurements. A GPU that Busy reports busy runs at a steady, healthy
// load; any other GPU idles at zero.
type Simulated struct {
	GPUs []SimGPU
	// Busy reports whether a replica holds the GPU with index i; nil
	// means none does.
	Busy func(i int) bool
	n    int
}

var _ Source = (*Simulated)(nil)

// Name returns "simulated".
func (*Simulated) Name() string { return SourceSimulated }

// Missing returns the fields a simulation does not make up.
func (*Simulated) Missing() []Field {
	return SetOf(PCIeTX, PCIeRX, NVLinkTX, NVLinkRX, ThrottleReasons, XID).Fields()
}

// Sample returns one reading of every demo GPU; its Time is zero (the
// Sampler stamps it).
func (s *Simulated) Sample(context.Context) (Sample, error) {
	s.n++
	out := Sample{GPUs: make([]GPUSample, len(s.GPUs))}
	for i, g := range s.GPUs {
		gs := GPUSample{UUID: g.UUID, Index: g.Index}
		busy := s.Busy != nil && s.Busy(g.Index)
		// A small wobble, so charts of a busy GPU are not a flat line.
		wobble := 0.04 * math.Sin(float64(s.n+g.Index))
		sm, tensor, util, mem, power := 0.0, 0.0, 0.0, 0.0, 70.0
		if busy {
			sm, tensor, util, mem, power = 0.85+wobble, 0.45+wobble, 98, 0.7, 550
		}
		gs.Set(GPUUtil, util)
		gs.Set(SMActive, sm)
		gs.Set(SMOccupancy, sm*0.6)
		gs.Set(TensorActive, tensor)
		gs.Set(DRAMActive, sm*0.4)
		gs.Set(FBTotal, g.MemoryMiB)
		gs.Set(FBUsed, math.Round(g.MemoryMiB*mem))
		gs.Set(Power, power)
		gs.Set(Temp, 35+sm*40)
		out.GPUs[i] = gs
	}
	return out, nil
}

// Close does nothing.
func (*Simulated) Close() error { return nil }
