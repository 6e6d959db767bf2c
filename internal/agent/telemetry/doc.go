// Package telemetry samples the GPUs of the machine an agent runs on:
// utilisation, DCGM's profiling ratios (SM active, SM occupancy, tensor and
// DRAM activity), memory, PCIe and NVLink traffic, power, temperature,
// clocks, throttle reasons and XID errors, with DCGM's field names and
// units (Field).
//
// A Source reads them. Detect picks the best this machine has: NVML
// (builds with -tags nvml and cgo; GPM metrics on Hopper and newer), else
// nvidia-smi --query-gpu, else a running dcgm-exporter's /metrics, else
// None, which reports no GPU and nothing else. Each source says which
// fields it cannot give (Missing); a field a GPU cannot give is missing
// from its GPUSample, never an error and never a made-up zero.
//
// The NVML logic is written against nvml.Interface and tested with
// go-nvml's mock servers. go-nvml's package compiles only with cgo and
// prints C deprecation warnings from NVIDIA's header, so nvml.go, its
// tests and the loader (nvml_lib.go) build only with -tags nvml and cgo
// (.ci/run runs them): a default build compiles no go-nvml, needs no cgo,
// prints no warnings and never opens libnvidia-ml.
//
// A Sampler samples one Source at an interval on an injected clock and
// keeps the last samples; each sample converts to efficiency.Readings for
// per-attempt judgement (package efficiency).
//
// Invariants: a Sample's GPUs are sorted by index with unique indexes; a
// GPUSample's Values are meaningful only where Present says so.
package telemetry
