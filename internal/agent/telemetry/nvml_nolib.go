//go:build !(nvml && cgo)

package telemetry

// openNVML reports NVML unavailable: this build has no NVML (build with
// -tags nvml and cgo for it).
func openNVML(NVMLOptions) (src Source, ok bool, err error) { return nil, false, nil }
