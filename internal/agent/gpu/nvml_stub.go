//go:build !(nvml && cgo)

package gpu

import "github.com/gpufleet/gpufleet/internal/model"

// discoverNVML reports NVML unavailable: this build has no NVML (build with
// -tags nvml and cgo for it).
func discoverNVML() (gpus []model.GPU, ok bool, err error) { return nil, false, nil }
