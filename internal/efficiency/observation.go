package efficiency

import (
	"math"
	"time"
)

// Reading is one GPU's telemetry at one time, in DCGM's units converted to
// fractions where DCGM uses percent. NaN means the source could not give
// the value.
type Reading struct {
	UUID string
	// SMActive, SMOccupancy, TensorActive, DRAMActive are DCGM's
	// profiling ratios, 0–1.
	SMActive, SMOccupancy, TensorActive, DRAMActive float64
	// GPUUtil is DCGM_FI_DEV_GPU_UTIL as a fraction, 0–1: coarse (one
	// busy SM counts as fully busy), used only where SM active is missing.
	GPUUtil float64
	// FBUsedMiB and FBTotalMiB are framebuffer memory.
	FBUsedMiB, FBTotalMiB float64
	// PCIe and NVLink traffic in bytes per second; PCIeRX is
	// host-to-device.
	PCIeTX, PCIeRX, NVLinkTX, NVLinkRX float64
}

// Observation is one attempt's GPUs at one time: the mean over its GPUs of
// each activity and traffic value (per GPU, so thresholds do not depend on
// the GPU count), and the largest memory use. NaN means no GPU of the
// attempt had the value.
type Observation struct {
	Time time.Time
	GPUs int
	// SMActive … GPUUtil are means over the GPUs, 0–1.
	SMActive, SMOccupancy, TensorActive, DRAMActive, GPUUtil float64
	// MemUsed is the largest used/total framebuffer fraction of the GPUs.
	MemUsed float64
	// PCIeRX and PCIeTX are mean bytes per second per GPU; NVLink is the
	// mean of TX+RX per GPU.
	PCIeRX, PCIeTX, NVLink float64
	// HostIOWait is the fraction of the node's CPU time spent waiting on
	// I/O over the sample interval, 0–1; NaN when unknown.
	HostIOWait float64
}

// Attribute builds the observation of an attempt whose allocation holds
// the GPUs uuids, from the readings of its node. ok is false when none of
// the attempt's GPUs has a reading. Readings of other GPUs are ignored.
func Attribute(at time.Time, readings []Reading, uuids []string, hostIOWait float64) (obs Observation, ok bool) {
	obs = Observation{Time: at, HostIOWait: hostIOWait}
	var sum [7]float64
	var cnt [7]int
	add := func(i int, v float64) {
		if !math.IsNaN(v) {
			sum[i] += v
			cnt[i]++
		}
	}
	mem := math.NaN()
	for i := range readings {
		r := &readings[i]
		if !contains(uuids, r.UUID) {
			continue
		}
		obs.GPUs++
		add(0, r.SMActive)
		add(1, r.SMOccupancy)
		add(2, r.TensorActive)
		add(3, r.DRAMActive)
		add(4, r.GPUUtil)
		add(5, r.PCIeRX)
		add(6, r.PCIeTX)
		if r.FBTotalMiB > 0 && !math.IsNaN(r.FBUsedMiB) {
			if f := r.FBUsedMiB / r.FBTotalMiB; math.IsNaN(mem) || f > mem {
				mem = f
			}
		}
	}
	if obs.GPUs == 0 {
		return Observation{}, false
	}
	mean := func(i int) float64 {
		if cnt[i] == 0 {
			return math.NaN()
		}
		return sum[i] / float64(cnt[i])
	}
	obs.SMActive, obs.SMOccupancy, obs.TensorActive = mean(0), mean(1), mean(2)
	obs.DRAMActive, obs.GPUUtil = mean(3), mean(4)
	obs.PCIeRX, obs.PCIeTX = mean(5), mean(6)
	obs.MemUsed = mem
	var nv float64
	n := 0
	for i := range readings {
		r := &readings[i]
		if !contains(uuids, r.UUID) || math.IsNaN(r.NVLinkTX) && math.IsNaN(r.NVLinkRX) {
			continue
		}
		nv += zeroNaN(r.NVLinkTX) + zeroNaN(r.NVLinkRX)
		n++
	}
	obs.NVLink = math.NaN()
	if n > 0 {
		obs.NVLink = nv / float64(n)
	}
	return obs, true
}

func contains(uuids []string, u string) bool {
	for _, x := range uuids {
		if x == u {
			return true
		}
	}
	return false
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
