package telemetry

import "github.com/gpufleet/gpufleet/internal/clock"

// NVMLOptions configures the NVML source. The zero value uses the wall
// clock.
type NVMLOptions struct {
	Clock clock.Clock
	// Close is called by Close (the real library's Shutdown); nil does
	// nothing.
	Close func() error
}
