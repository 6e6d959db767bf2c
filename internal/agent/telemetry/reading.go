package telemetry

import "github.com/gpufleet/gpufleet/internal/efficiency"

// Reading converts the sample to efficiency's units: DCGM's percent
// utilisations become fractions, missing values NaN.
func (g *GPUSample) Reading() efficiency.Reading {
	return efficiency.Reading{
		UUID:         g.UUID,
		SMActive:     g.Value(SMActive),
		SMOccupancy:  g.Value(SMOccupancy),
		TensorActive: g.Value(TensorActive),
		DRAMActive:   g.Value(DRAMActive),
		GPUUtil:      g.Value(GPUUtil) / 100,
		FBUsedMiB:    g.Value(FBUsed),
		FBTotalMiB:   g.Value(FBTotal),
		PCIeTX:       g.Value(PCIeTX),
		PCIeRX:       g.Value(PCIeRX),
		NVLinkTX:     g.Value(NVLinkTX),
		NVLinkRX:     g.Value(NVLinkRX),
	}
}

// Readings converts every GPU of the sample.
func (s Sample) Readings() []efficiency.Reading {
	out := make([]efficiency.Reading, len(s.GPUs))
	for i := range s.GPUs {
		out[i] = s.GPUs[i].Reading()
	}
	return out
}
