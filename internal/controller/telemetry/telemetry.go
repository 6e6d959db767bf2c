package telemetry

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/gpuseries"
	"github.com/gpufleet/gpufleet/internal/model"
)

// DCGM fields the tracker reads by name.
const (
	FieldSMActive = "DCGM_FI_PROF_SM_ACTIVE"
	FieldXID      = "DCGM_FI_DEV_XID_ERRORS"
)

// maxAlerts bounds the recent alerts kept.
const maxAlerts = 200

// Tracker keeps the fleet's GPU telemetry. Its methods are safe for
// concurrent use.
type Tracker struct {
	drainXIDs []int

	// mu guards everything below.
	mu    sync.Mutex
	eff   *efficiency.Tracker
	nodes map[string]*node
	// final is each job's last judged attempt once it has ended.
	final  map[string]Final
	alerts []model.Alert
	// plots keeps per-GPU series of live attempts and of the last
	// maxEndedPlots ended ones (ended, oldest first), for job pages.
	plots map[string]*attemptPlots
	ended []string
}

// maxEndedPlots bounds the ended attempts whose GPU series are kept.
const maxEndedPlots = 2048

// attemptPlots is one attempt's GPU series, by node and GPU index.
type attemptPlots struct {
	gpus map[GPUKey]*gpuseries.Series
}

// GPUKey names one GPU of a node.
type GPUKey struct {
	Node  string
	Index int
}

// node is what the tracker keeps per node.
type node struct {
	source    string
	latest    agentapi.TelemetrySample
	hasLatest bool
	// lastXID is the last XID seen per GPU UUID, so one error is
	// reported once.
	lastXID map[string]float64
}

// Final is an ended attempt's last verdict.
type Final struct {
	Attempt string
	Verdict efficiency.Verdict
	// Source is the telemetry source of the attempt's first node.
	Source string
}

// XID is a new XID error from the drain list on one GPU of a node.
type XID struct {
	At    time.Time
	Node  string
	GPU   int // index
	UUID  string
	Code  int
	Value float64
}

// New returns a tracker judging efficiency with th (zero fields default)
// and reporting the XID codes in drain.
func New(th efficiency.Thresholds, drain []int) *Tracker {
	return &Tracker{
		drainXIDs: slices.Clone(drain),
		eff:       efficiency.NewTracker(th),
		nodes:     map[string]*node{},
		final:     map[string]Final{},
		plots:     map[string]*attemptPlots{},
	}
}

func (t *Tracker) nodeLocked(id string) *node {
	n := t.nodes[id]
	if n == nil {
		n = &node{lastXID: map[string]float64{}}
		t.nodes[id] = n
	}
	return n
}

// Observe records one node's telemetry: its source, its newest sample,
// and each sample attributed to the attempts running there (allocs maps
// attempt ids to their GPU UUIDs on this node). It returns the new XIDs
// of the drain list, in sample order, for the caller to act on (drain the
// node, alert); an XID value is reported once per GPU until it changes.
func (t *Tracker) Observe(nodeID string, tel *agentapi.Telemetry, allocs map[string][]string) []XID {
	if tel == nil {
		return nil
	}
	readings := make([][]efficiency.Reading, len(tel.Samples))
	for i, s := range tel.Samples {
		rs := make([]efficiency.Reading, len(s.GPUs))
		for j, g := range s.GPUs {
			rs[j] = Reading(g)
		}
		readings[i] = rs
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.nodeLocked(nodeID)
	n.source = tel.Source
	if len(tel.Samples) == 0 {
		return nil
	}
	var xids []XID
	for i, s := range tel.Samples {
		t.eff.Observe(s.Time, readings[i], allocs, math.NaN())
		t.plotLocked(nodeID, s, allocs)
		for _, g := range s.GPUs {
			x, ok := g.Values[FieldXID]
			if !ok || x == 0 || n.lastXID[g.UUID] == x {
				continue
			}
			n.lastXID[g.UUID] = x
			if slices.Contains(t.drainXIDs, int(x)) {
				xids = append(xids, XID{At: s.Time, Node: nodeID, GPU: g.Index, UUID: g.UUID, Code: int(x), Value: x})
			}
		}
	}
	n.latest, n.hasLatest = tel.Samples[len(tel.Samples)-1], true
	return xids
}

// Reading converts a wire reading to efficiency's units: percent
// utilisation to a fraction, missing fields NaN.
func Reading(g agentapi.GPUTelemetry) efficiency.Reading {
	v := func(name string, scale float64) float64 {
		x, ok := g.Values[name]
		if !ok {
			return math.NaN()
		}
		return x * scale
	}
	return efficiency.Reading{
		UUID:         g.UUID,
		SMActive:     v(FieldSMActive, 1),
		SMOccupancy:  v("DCGM_FI_PROF_SM_OCCUPANCY", 1),
		TensorActive: v("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1),
		DRAMActive:   v("DCGM_FI_PROF_DRAM_ACTIVE", 1),
		GPUUtil:      v("DCGM_FI_DEV_GPU_UTIL", 0.01),
		FBUsedMiB:    v("DCGM_FI_DEV_FB_USED", 1),
		FBTotalMiB:   v("DCGM_FI_DEV_FB_TOTAL", 1),
		PCIeTX:       v("DCGM_FI_PROF_PCIE_TX_BYTES", 1),
		PCIeRX:       v("DCGM_FI_PROF_PCIE_RX_BYTES", 1),
		NVLinkTX:     v("DCGM_FI_PROF_NVLINK_TX_BYTES", 1),
		NVLinkRX:     v("DCGM_FI_PROF_NVLINK_RX_BYTES", 1),
	}
}

// Source returns a node's telemetry source, "" before any telemetry.
func (t *Tracker) Source(nodeID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.nodes[nodeID]; n != nil {
		return n.source
	}
	return ""
}

// Latest returns a node's newest sample; false before one.
func (t *Tracker) Latest(nodeID string) (agentapi.TelemetrySample, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.nodes[nodeID]; n != nil && n.hasLatest {
		return n.latest, true
	}
	return agentapi.TelemetrySample{}, false
}

// EachLatest calls fn with every node's newest sample, in no order, with
// the tracker's lock held: fn must not call the tracker.
func (t *Tracker) EachLatest(fn func(nodeID string, s agentapi.TelemetrySample)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, n := range t.nodes {
		if n.hasLatest {
			fn(id, n.latest)
		}
	}
}

// Verdict returns a running attempt's last verdict; false when it is not
// tracked (no telemetry yet, or it ended).
func (t *Tracker) Verdict(attemptID string) (efficiency.Verdict, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, _, ok := t.eff.Verdict(attemptID)
	return v, ok
}

// Final returns the last verdict of a job's ended attempt.
func (t *Tracker) Final(jobID string) (Final, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.final[jobID]
	return f, ok
}

// SMActive is the mean SM activity of an attempt's last verdict, running
// or ended (for the meter); false when unknown.
func (t *Tracker) SMActive(jobID, attemptID string) (float64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, _, ok := t.eff.Verdict(attemptID)
	if !ok {
		f, found := t.final[jobID]
		if !found || f.Attempt != attemptID {
			return 0, false
		}
		v = f.Verdict
	}
	sm := v.Summary.SMActive
	if math.IsNaN(sm) {
		return 0, false
	}
	return sm, true
}

// Tracked lists the attempts with a history, sorted.
func (t *Tracker) Tracked() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.eff.Attempts()
}

// Ended is a tracked attempt that no longer runs.
type Ended struct {
	Attempt string
	// Job is its job and Node its first node; Job is empty for an
	// attempt the state does not know (nothing is kept of it).
	Job, Node string
}

// End forgets attempts that ended, keeping each one's last verdict as its
// job's final one. An attempt ended twice (a late sample re-tracked it)
// keeps the verdict of the first end.
func (t *Tracker) End(ended []Ended) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range ended {
		if v, _, ok := t.eff.Verdict(e.Attempt); ok && e.Job != "" {
			if prev, had := t.final[e.Job]; !had || prev.Attempt != e.Attempt {
				f := Final{Attempt: e.Attempt, Verdict: v}
				if n := t.nodes[e.Node]; n != nil {
					f.Source = n.source
				}
				t.final[e.Job] = f
			}
		}
		t.eff.Forget(e.Attempt)
		if _, ok := t.plots[e.Attempt]; ok && !slices.Contains(t.ended, e.Attempt) {
			t.ended = append(t.ended, e.Attempt)
		}
	}
	if over := len(t.ended) - maxEndedPlots; over > 0 {
		for _, id := range t.ended[:over] {
			delete(t.plots, id)
		}
		t.ended = slices.Delete(t.ended, 0, over)
	}
}

// Judged is a tracked attempt's verdict.
type Judged struct {
	Attempt string
	Verdict efficiency.Verdict
}

// Evaluate classifies every tracked attempt at now and returns their
// verdicts, sorted by attempt id.
func (t *Tracker) Evaluate(now time.Time) []Judged {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eff.Evaluate(now)
	ids := t.eff.Attempts()
	out := make([]Judged, len(ids))
	for i, id := range ids {
		v, _, _ := t.eff.Verdict(id)
		out[i] = Judged{Attempt: id, Verdict: v}
	}
	return out
}

// Record keeps an alert among the recent ones (the newest 200).
func (t *Tracker) Record(a model.Alert) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.alerts = append(t.alerts, a)
	if len(t.alerts) > maxAlerts {
		t.alerts = slices.Delete(t.alerts, 0, len(t.alerts)-maxAlerts)
	}
}

// Alerts returns the recent alerts, oldest first.
func (t *Tracker) Alerts() []model.Alert {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.alerts)
}

// plotLocked adds one sample of a node to the GPU series of the attempts
// holding its GPUs. Callers hold t.mu.
func (t *Tracker) plotLocked(nodeID string, s agentapi.TelemetrySample, allocs map[string][]string) {
	for id, uuids := range allocs {
		for _, g := range s.GPUs {
			if !slices.Contains(uuids, g.UUID) {
				continue
			}
			p := t.plots[id]
			if p == nil {
				p = &attemptPlots{gpus: map[GPUKey]*gpuseries.Series{}}
				t.plots[id] = p
			}
			k := GPUKey{Node: nodeID, Index: g.Index}
			ser := p.gpus[k]
			if ser == nil {
				ser = gpuseries.New()
				p.gpus[k] = ser
			}
			val := func(name string) float64 {
				if x, ok := g.Values[name]; ok {
					return x
				}
				return math.NaN()
			}
			ser.Add(gpuseries.Reading{Time: s.Time, SMActive: val(FieldSMActive), MemUsedMiB: val("DCGM_FI_DEV_FB_USED"),
				MemTotalMiB: val("DCGM_FI_DEV_FB_TOTAL"), PowerW: val("DCGM_FI_DEV_POWER_USAGE")})
		}
	}
}

// Plots returns an attempt's GPU series, sorted by node and index; nil
// when none is kept (no telemetry, or it ended long ago).
func (t *Tracker) Plots(attemptID string) []gpuseries.GPU {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.plots[attemptID]
	if p == nil {
		return nil
	}
	out := make([]gpuseries.GPU, 0, len(p.gpus))
	for k, s := range p.gpus {
		out = append(out, gpuseries.GPU{Node: k.Node, Index: k.Index, Points: s.Points()})
	}
	slices.SortFunc(out, func(a, b gpuseries.GPU) int {
		if a.Node != b.Node {
			if a.Node < b.Node {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	return out
}
