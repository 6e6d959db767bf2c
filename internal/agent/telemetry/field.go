package telemetry

import (
	"math"
	"math/bits"
)

// Field is one GPU metric. Its String is the DCGM field name
// (DCGM_FI_PROF_SM_ACTIVE, …), which is also the name the metric keeps in
// Prometheus and in dcgm-exporter. Fields are small integers so that a
// GPUSample holds its values in a fixed array: cheap to copy, no map.
type Field uint8

// The fields a source may report, in DCGM's units: fractions 0–1 for the
// DCGM_FI_PROF_* activity ratios, percent 0–100 for the DCGM_FI_DEV_*
// utilisations, MiB for framebuffer memory, bytes per second for PCIe and
// NVLink traffic, watts, degrees Celsius, MHz.
const (
	// GPUUtil is the percent of time one or more kernels ran (coarse:
	// a single busy SM counts as 100%).
	GPUUtil Field = iota
	// MemCopyUtil is the percent of time device memory was read or written
	// (nvidia-smi's utilization.memory).
	MemCopyUtil
	// SMActive is the fraction of time an SM had at least one warp
	// resident, averaged over all SMs.
	SMActive
	// SMOccupancy is the fraction of resident warps to the SMs' maximum.
	SMOccupancy
	// TensorActive is the fraction of cycles any tensor pipe was active.
	TensorActive
	// DRAMActive is the fraction of cycles device memory was sending or
	// receiving data.
	DRAMActive
	// FBUsed and FBTotal are framebuffer memory in MiB.
	FBUsed
	FBTotal
	// PCIeTX and PCIeRX are PCIe bytes per second sent and received by
	// the GPU; RX is host-to-device traffic (plus peer writes).
	PCIeTX
	PCIeRX
	// NVLinkTX and NVLinkRX are NVLink bytes per second over all links.
	NVLinkTX
	NVLinkRX
	// Power is the board power draw in watts.
	Power
	// Temp is the GPU core temperature in °C.
	Temp
	// SMClock and MemClock are the current clocks in MHz.
	SMClock
	MemClock
	// ThrottleReasons is NVML's clocks-event (throttle) reason bitmask.
	ThrottleReasons
	// XID is the last XID error code seen on the GPU since the source
	// started, 0 for none, as DCGM reports it (sticky, not a count).
	XID

	// NumFields is the number of fields; not a field.
	NumFields
)

var fieldNames = [NumFields]string{
	GPUUtil:         "DCGM_FI_DEV_GPU_UTIL",
	MemCopyUtil:     "DCGM_FI_DEV_MEM_COPY_UTIL",
	SMActive:        "DCGM_FI_PROF_SM_ACTIVE",
	SMOccupancy:     "DCGM_FI_PROF_SM_OCCUPANCY",
	TensorActive:    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
	DRAMActive:      "DCGM_FI_PROF_DRAM_ACTIVE",
	FBUsed:          "DCGM_FI_DEV_FB_USED",
	FBTotal:         "DCGM_FI_DEV_FB_TOTAL",
	PCIeTX:          "DCGM_FI_PROF_PCIE_TX_BYTES",
	PCIeRX:          "DCGM_FI_PROF_PCIE_RX_BYTES",
	NVLinkTX:        "DCGM_FI_PROF_NVLINK_TX_BYTES",
	NVLinkRX:        "DCGM_FI_PROF_NVLINK_RX_BYTES",
	Power:           "DCGM_FI_DEV_POWER_USAGE",
	Temp:            "DCGM_FI_DEV_GPU_TEMP",
	SMClock:         "DCGM_FI_DEV_SM_CLOCK",
	MemClock:        "DCGM_FI_DEV_MEM_CLOCK",
	ThrottleReasons: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
	XID:             "DCGM_FI_DEV_XID_ERRORS",
}

// String returns the DCGM field name.
func (f Field) String() string {
	if f >= NumFields {
		return "DCGM_FI_UNKNOWN"
	}
	return fieldNames[f]
}

// ParseField returns the field with a DCGM name.
func ParseField(name string) (Field, bool) {
	for f, n := range fieldNames {
		if n == name {
			return Field(f), true
		}
	}
	return 0, false
}

// Fields returns every field in order.
func Fields() []Field {
	fs := make([]Field, NumFields)
	for i := range fs {
		fs[i] = Field(i)
	}
	return fs
}

// FieldSet is a set of fields as a bitmask.
type FieldSet uint32

// AllFields holds every field.
const AllFields FieldSet = 1<<NumFields - 1

// SetOf returns the set of fs.
func SetOf(fs ...Field) FieldSet {
	var s FieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// Has reports whether f is in s.
func (s FieldSet) Has(f Field) bool { return f < NumFields && s&(1<<f) != 0 }

// Fields lists the fields of s in order, nil for none.
func (s FieldSet) Fields() []Field {
	s &= AllFields
	if s == 0 {
		return nil
	}
	fs := make([]Field, 0, bits.OnesCount32(uint32(s)))
	for f := range NumFields {
		if s.Has(f) {
			fs = append(fs, f)
		}
	}
	return fs
}

// GPUSample is one reading of one GPU. Values holds a value only where
// Present has its field; elsewhere it is zero and means nothing. It is a
// plain value (no pointers but the UUID string) so copying it is cheap.
type GPUSample struct {
	UUID    string
	Index   int
	Values  [NumFields]float64
	Present FieldSet
}

// Set records v for f. NaN and infinities are not values: they leave f
// missing.
func (g *GPUSample) Set(f Field, v float64) {
	if f >= NumFields || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	g.Values[f] = v
	g.Present |= 1 << f
}

// Get returns f's value and whether the sample has one.
func (g *GPUSample) Get(f Field) (float64, bool) {
	if !g.Present.Has(f) {
		return 0, false
	}
	return g.Values[f], true
}

// Value returns f's value, or NaN when the sample has none.
func (g *GPUSample) Value(f Field) float64 {
	if !g.Present.Has(f) {
		return math.NaN()
	}
	return g.Values[f]
}
