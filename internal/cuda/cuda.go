// Package cuda says whether code built for a CUDA version runs on an NVIDIA
// driver, by NVIDIA's published table of minimum drivers. It is pure.
package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// minDriver is the least Linux x86_64 driver each CUDA toolkit release
// needs for all its features: NVIDIA, "CUDA Toolkit Release Notes",
// Table 3 "CUDA Toolkit and Corresponding Driver Versions"
// (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/), GA releases.
var minDriver = map[string]string{
	"11.0": "450.36.06", "11.1": "455.23", "11.2": "460.27.03", "11.3": "465.19.01",
	"11.4": "470.42.01", "11.5": "495.29.05", "11.6": "510.39.01", "11.7": "515.43.04",
	"11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
	"12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
	"12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
}

// minorCompat is the least driver of each CUDA major under NVIDIA's minor
// version compatibility (same notes, Table 2): an application built with
// any 12.x runs on a 12.0 driver, PTX JIT and newer-driver features aside.
var minorCompat = map[int]string{11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

// Verdict is whether an image's CUDA runs on a driver.
type Verdict struct {
	OK bool
	// Reason says why, with the versions compared.
	Reason string
}

// Check compares an image's CUDA version ("12.4.1"; empty: the image
// names none) with a node's driver version ("550.54.15"; empty: no NVIDIA
// driver).
func Check(imageCUDA, driver string) Verdict {
	if imageCUDA == "" {
		return Verdict{OK: true, Reason: "the image names no CUDA version"}
	}
	major, minor, ok := ParseVersion(imageCUDA)
	if !ok {
		return Verdict{OK: false, Reason: fmt.Sprintf("the image's CUDA version %q is not MAJOR.MINOR[.PATCH]", imageCUDA)}
	}
	if driver == "" {
		return Verdict{OK: false, Reason: fmt.Sprintf("the image needs CUDA %s and this node has no NVIDIA driver", imageCUDA)}
	}
	mm := fmt.Sprintf("%d.%d", major, minor)
	if need, known := minDriver[mm]; known && versionAtLeast(driver, need) {
		return Verdict{OK: true, Reason: fmt.Sprintf("driver %s ≥ %s, the least for CUDA %s", driver, need, mm)}
	}
	if need, known := minorCompat[major]; known && versionAtLeast(driver, need) {
		return Verdict{OK: true, Reason: fmt.Sprintf("driver %s runs CUDA %d.x through minor version compatibility (≥ %s); PTX JIT of newer code may fail", driver, major, need)}
	}
	need := minDriver[mm]
	if need == "" {
		need = minorCompat[major]
	}
	if need == "" {
		return Verdict{OK: false, Reason: fmt.Sprintf("CUDA %s is not in NVIDIA's driver table that gpufleet knows", imageCUDA)}
	}
	return Verdict{OK: false, Reason: fmt.Sprintf("the image needs CUDA %s, which needs driver ≥ %s; this node has %s", mm, need, driver)}
}

// ParseVersion reads MAJOR.MINOR[.PATCH].
func ParseVersion(v string) (major, minor int, ok bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// versionAtLeast compares dotted numeric versions.
func versionAtLeast(have, need string) bool {
	h, n := strings.Split(have, "."), strings.Split(need, ".")
	for i := range max(len(h), len(n)) {
		var a, b int
		if i < len(h) {
			a, _ = strconv.Atoi(h[i])
		}
		if i < len(n) {
			b, _ = strconv.Atoi(n[i])
		}
		if a != b {
			return a > b
		}
	}
	return true
}
