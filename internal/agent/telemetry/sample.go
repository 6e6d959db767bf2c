package telemetry

import (
	"context"
	"time"
)

// Sample is one reading of every GPU of a machine, sorted by index. A
// machine with no GPU has none.
type Sample struct {
	Time time.Time
	GPUs []GPUSample
}

// GPU returns the reading of the GPU with uuid.
func (s Sample) GPU(uuid string) (GPUSample, bool) {
	for _, g := range s.GPUs {
		if g.UUID == uuid {
			return g, true
		}
	}
	return GPUSample{}, false
}

// Source reads the GPUs of this machine.
//
// Implementations are not safe for concurrent use: one Sampler (or one
// goroutine) owns a Source. Rates (PCIe, NVLink bytes per second) and GPM
// ratios are measured between consecutive calls to Sample, or over a
// window the driver chooses, so the first sample of a source may lack them.
type Source interface {
	// Name says which source this is: "nvml", "nvidia-smi",
	// "dcgm-exporter" or "none".
	Name() string
	// Missing lists the fields this source cannot give on this machine.
	// It may shrink or grow after the first Sample, once the source has
	// asked the hardware; "none" misses every field.
	Missing() []Field
	// Sample reads every GPU now. ctx bounds any command or request. An
	// error means this reading failed (a wedged driver, an exporter that
	// went away); the next call may succeed. A field that one GPU cannot
	// give is missing from that GPU's reading, not an error.
	Sample(ctx context.Context) (Sample, error)
	// Close releases what the source holds (NVML handles). The source is
	// unusable after it.
	Close() error
}

// Names of the sources.
const (
	SourceNVML         = "nvml"
	SourceNvidiaSMI    = "nvidia-smi"
	SourceDCGMExporter = "dcgm-exporter"
	SourceNone         = "none"
)

// None is the source of a machine without GPUs: it reports no GPU and
// nothing else.
type None struct{}

var _ Source = None{}

// Name returns "none".
func (None) Name() string { return SourceNone }

// Missing returns every field.
func (None) Missing() []Field { return Fields() }

// Sample returns a sample with no GPUs; its Time is zero, as None has no
// clock (the Sampler stamps it).
func (None) Sample(context.Context) (Sample, error) { return Sample{}, nil }

// Close does nothing.
func (None) Close() error { return nil }
