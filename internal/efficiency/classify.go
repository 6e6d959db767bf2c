package efficiency

import (
	"fmt"
	"math"
	"time"
)

// Class is a judgement of how an attempt uses its GPUs.
type Class string

// Classes, in order of precedence: a Verdict's Class is the first of them
// that applies. OversizedMemory is never the Class, only a finding beside
// it: memory fit is independent of activity.
const (
	// Unknown: not enough telemetry yet (or none: a source without
	// activity fields, an attempt without GPUs).
	Unknown Class = "unknown"
	// Idle: SM activity below Thresholds.IdleSM for Thresholds.IdleFor.
	Idle Class = "idle"
	// InputBound: low, bursty SM activity, little host-to-device traffic,
	// and a host waiting on I/O: the GPUs starve for data.
	InputBound Class = "input-bound"
	// CommunicationBound: SM activity below healthy while NVLink or PCIe
	// traffic is heavy: the GPUs wait on collectives.
	CommunicationBound Class = "communication-bound"
	// MemoryBound: DRAM busy while SM activity is below healthy.
	MemoryBound Class = "memory-bound"
	// UnderUsed: SM activity below Thresholds.UnderUsedSM.
	UnderUsed Class = "under-used"
	// Healthy: SM activity at or above Thresholds.HealthySM with tensor
	// cores in use.
	Healthy Class = "healthy"
	// Active: busy, none of the above (SM active between under-used and
	// healthy, or high without tensor work).
	Active Class = "active"
	// OversizedMemory: peak memory use below Thresholds.OversizedMemory of
	// the GPU: a smaller GPU would do.
	OversizedMemory Class = "oversized-memory"
)

// Thresholds are the limits Classify applies. The zero value means
// DefaultThresholds; set fields override one by one.
type Thresholds struct {
	// IdleSM and IdleFor: SM active below IdleSM (0.05) for IdleFor
	// (10 min) is idle. A busy GPU runs well above 0.05; a process that
	// holds a GPU but waits (a notebook, a stuck data loader) sits near 0.
	IdleSM  float64
	IdleFor time.Duration
	// MaxGap is the longest stretch without telemetry that still counts
	// as one run of idleness (1 min): a missed sample does not reset idle.
	MaxGap time.Duration
	// Window is how far back the other classes look (10 min), and
	// MinObserved how much of it must have telemetry (2 min).
	Window      time.Duration
	MinObserved time.Duration
	// UnderUsedSM (0.5): NVIDIA's DCGM guidance reads SM active below
	// ~0.5 as a GPU used inefficiently (most of its SMs idle most of
	// the time).
	UnderUsedSM float64
	// HealthySM (0.8) and HealthyTensor (0.1): SM active ≥ 0.8 is well
	// used per the same guidance; tensor pipes active ≥ 0.1 shows the
	// work is the matrix math the GPU is bought for.
	HealthySM     float64
	HealthyTensor float64
	// MemoryBoundDRAM (0.5): DRAM active above ~0.5 means the memory
	// interface, not compute, sets the pace (DCGM profiling guidance).
	MemoryBoundDRAM float64
	// CommNVLink (50 GB/s per GPU, TX+RX) and CommPCIeTX (8 GB/s per
	// GPU, roughly half a PCIe Gen4 x16 link): interconnect traffic this
	// heavy while SMs are below healthy means collectives dominate.
	CommNVLink float64
	CommPCIeTX float64
	// InputBurstyCV (0.5), InputMaxH2D (1 GB/s per GPU) and
	// InputIOWait (0.2): SM activity below UnderUsedSM whose coefficient
	// of variation is at least 0.5, with host-to-device traffic below
	// 1 GB/s and the host's CPUs waiting on I/O at least 20% of the
	// time, is a GPU waiting for input.
	InputBurstyCV float64
	InputMaxH2D   float64
	InputIOWait   float64
	// OversizedMemory (0.5): peak memory below half of the GPU's, after
	// at least Window of telemetry.
	OversizedMemory float64
}

// DefaultThresholds are the documented defaults (see Thresholds).
var DefaultThresholds = Thresholds{
	IdleSM: 0.05, IdleFor: 10 * time.Minute, MaxGap: time.Minute,
	Window: 10 * time.Minute, MinObserved: 2 * time.Minute,
	UnderUsedSM: 0.5, HealthySM: 0.8, HealthyTensor: 0.1,
	MemoryBoundDRAM: 0.5, CommNVLink: 50e9, CommPCIeTX: 8e9,
	InputBurstyCV: 0.5, InputMaxH2D: 1e9, InputIOWait: 0.2,
	OversizedMemory: 0.5,
}

// withDefaults fills zero fields from DefaultThresholds.
func (t Thresholds) withDefaults() Thresholds {
	d := DefaultThresholds
	fill := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	fillD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&t.IdleSM, d.IdleSM)
	fillD(&t.IdleFor, d.IdleFor)
	fillD(&t.MaxGap, d.MaxGap)
	fillD(&t.Window, d.Window)
	fillD(&t.MinObserved, d.MinObserved)
	fill(&t.UnderUsedSM, d.UnderUsedSM)
	fill(&t.HealthySM, d.HealthySM)
	fill(&t.HealthyTensor, d.HealthyTensor)
	fill(&t.MemoryBoundDRAM, d.MemoryBoundDRAM)
	fill(&t.CommNVLink, d.CommNVLink)
	fill(&t.CommPCIeTX, d.CommPCIeTX)
	fill(&t.InputBurstyCV, d.InputBurstyCV)
	fill(&t.InputMaxH2D, d.InputMaxH2D)
	fill(&t.InputIOWait, d.InputIOWait)
	fill(&t.OversizedMemory, d.OversizedMemory)
	return t
}

// Finding is one class that applies, and why.
type Finding struct {
	Class  Class  `json:"class"`
	Reason string `json:"reason"`
}

// Summary is what the verdict saw over its window; NaN where unknown.
type Summary struct {
	SMActive     float64 `json:"smActive"`
	TensorActive float64 `json:"tensorActive"`
	DRAMActive   float64 `json:"dramActive"`
	PeakMemory   float64 `json:"peakMemory"`
	// SMFromUtil is set when SMActive is GPU utilisation standing in for
	// a source without SM active (it overstates activity).
	SMFromUtil bool `json:"smFromUtil,omitempty"`
}

// Verdict is the judgement of one attempt at one time.
type Verdict struct {
	At    time.Time `json:"at"`
	Class Class     `json:"class"`
	// Findings are every class that applies, Class first.
	Findings []Finding `json:"findings"`
	// IdleSince is the start of the current run of activity below
	// IdleSM (to a 10 s bucket), zero if none; Class is Idle once the
	// run is IdleFor long.
	IdleSince time.Time `json:"idleSince,omitzero"`
	Summary   Summary   `json:"summary"`
}

// Has reports whether c is among the findings.
func (v Verdict) Has(c Class) bool {
	for _, f := range v.Findings {
		if f.Class == c {
			return true
		}
	}
	return false
}

// Classify judges the history at now under th (zero fields default).
func Classify(h *History, now time.Time, th Thresholds) Verdict {
	th = th.withDefaults()
	v := Verdict{At: now, Class: Unknown}
	w := h.window(now, th.Window)
	sm, fromUtil := w.mean(mSM), false
	if math.IsNaN(sm) {
		sm, fromUtil = w.mean(mUtil), true
	}
	peak, _ := h.PeakMemory()
	v.Summary = Summary{SMActive: sm, TensorActive: w.mean(mTensor), DRAMActive: w.mean(mDRAM), PeakMemory: peak, SMFromUtil: fromUtil && !math.IsNaN(sm)}
	if w.n == 0 || math.IsNaN(sm) {
		v.Findings = []Finding{{Unknown, "no GPU activity telemetry in the last " + th.Window.String()}}
		return v
	}
	smName := "SM active"
	if fromUtil {
		smName = "GPU utilisation (SM active unavailable)"
	}
	var f []Finding
	add := func(c Class, format string, args ...any) { f = append(f, Finding{c, fmt.Sprintf(format, args...)}) }

	// 1. Idle: a long enough run of low activity.
	v.IdleSince = h.lowSince(now, th.IdleSM, th.MaxGap)
	if !v.IdleSince.IsZero() && now.Sub(v.IdleSince) >= th.IdleFor {
		add(Idle, "%s below %s since %s (%s)", smName, pct(th.IdleSM), v.IdleSince.UTC().Format(time.RFC3339), now.Sub(v.IdleSince).Truncate(time.Second))
	}
	observed := now.Sub(maxTime(w.first, now.Add(-th.Window)))
	if len(f) == 0 && observed < th.MinObserved {
		v.Findings = []Finding{{Unknown, fmt.Sprintf("%s of telemetry, need %s", observed.Truncate(time.Second), th.MinObserved)}}
		return v
	}
	// 2. Bottlenecks, which explain low activity.
	tensor, dram := w.mean(mTensor), w.mean(mDRAM)
	h2d, io, cv := w.mean(mPCIeRX), w.mean(mIOWait), w.smCV()
	nvlink, ptx := w.mean(mNVLink), w.mean(mPCIeTX)
	if sm < th.UnderUsedSM && cv >= th.InputBurstyCV && h2d < th.InputMaxH2D && io >= th.InputIOWait {
		add(InputBound, "%s %s and bursty (variation %.2f) with host-to-device traffic %s/s per GPU and host I/O wait %s", smName, pct(sm), cv, bytesStr(h2d), pct(io))
	}
	if sm < th.HealthySM && (nvlink >= th.CommNVLink || ptx >= th.CommPCIeTX) {
		add(CommunicationBound, "%s %s while NVLink carries %s/s and PCIe sends %s/s per GPU", smName, pct(sm), bytesStr(nvlink), bytesStr(ptx))
	}
	if sm < th.HealthySM && dram >= th.MemoryBoundDRAM {
		add(MemoryBound, "DRAM active %s while %s is %s", pct(dram), smName, pct(sm))
	}
	// 3. Activity.
	switch {
	case sm < th.UnderUsedSM:
		add(UnderUsed, "%s %s, below %s", smName, pct(sm), pct(th.UnderUsedSM))
	case sm >= th.HealthySM && tensor >= th.HealthyTensor:
		add(Healthy, "%s %s with tensor pipes active %s", smName, pct(sm), pct(tensor))
	default:
		add(Active, "%s %s, tensor pipes %s", smName, pct(sm), pct(tensor))
	}
	// 4. Memory fit, once the attempt has run a window.
	if lived := now.Sub(h.First()); lived >= th.Window && !math.IsNaN(peak) && peak < th.OversizedMemory {
		add(OversizedMemory, "peak memory %s of the GPU over %s, below %s", pct(peak), lived.Truncate(time.Second), pct(th.OversizedMemory))
	}
	v.Findings = f
	v.Class = f[0].Class
	return v
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func bytesStr(v float64) string {
	switch {
	case math.IsNaN(v):
		return "unknown"
	case v >= 1e9:
		return fmt.Sprintf("%.1f GB", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}
