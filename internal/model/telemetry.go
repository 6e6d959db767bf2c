package model

import "time"

// TelemetrySample is one reading of every GPU of the node.
type TelemetrySample struct {
	Time time.Time      `json:"time"`
	GPUs []GPUTelemetry `json:"gpus"`
}

// GPUTelemetry is one GPU's reading. Values holds DCGM field names
// (DCGM_FI_PROF_SM_ACTIVE, …) in DCGM's units; a field the source could
// not read is absent, never zero.
type GPUTelemetry struct {
	Index  int                `json:"index"`
	UUID   string             `json:"uuid"`
	Values map[string]float64 `json:"values,omitempty"`
}
