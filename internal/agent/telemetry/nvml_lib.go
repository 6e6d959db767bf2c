//go:build nvml && cgo

package telemetry

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// openNVML loads the NVML library. ok is false when the library or the
// driver is missing, so Detect tries the next source.
func openNVML(opts NVMLOptions) (src Source, ok bool, err error) {
	lib := nvml.New()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("initializing NVML: %w", ret)
	}
	opts.Close = func() error {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			return fmt.Errorf("shutting NVML down: %w", ret)
		}
		return nil
	}
	s, err := NewNVML(lib, opts)
	if err != nil {
		_ = opts.Close()
		return nil, false, err
	}
	return s, true, nil
}
