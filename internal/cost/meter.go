package cost

import (
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// NodeUsage is one node as the meter sees it over a pass: its price and
// capacity and the allocations on it. Zero Start or End means the node
// existed before or after the pass.
type NodeUsage struct {
	NodeID       string
	Pool         string
	Provider     string
	Region       string
	InstanceType string
	GPUModel     string
	CapacityType model.CapacityType
	PriceSource  model.PriceSource
	// PricePerHour is the whole node's price in micro-dollars per hour.
	PricePerHour model.Money
	// GPUs and CPU are the node's capacity; GPUs may be 0 for CPU-only
	// nodes.
	GPUs       float64
	CPU        float64
	Start, End time.Time
	// Origin is where the node's bill starts: the provider's launch time.
	// The node's time is counted in whole seconds since Origin, as a
	// per-second bill counts it, so the ledger of an instance equals its
	// provider's bill. Zero: whole Unix seconds (machines no provider
	// bills per second).
	Origin      time.Time
	Allocations []Allocation
}

// Allocation is one replica of one attempt on the node: what it holds and
// when. A zero End means still running.
type Allocation struct {
	JobID     string
	AttemptID string
	Attempt   int
	Project   string
	User      string
	Queue     string
	// Tags are the job's tags; entries share the map, so treat it as
	// immutable.
	Tags       map[string]string
	GPUs       float64
	CPU        float64
	Start, End time.Time
	// SMActive is the mean DCGM SM-active fraction (0–1) of the
	// allocation's GPUs over the pass; Telemetry says it was measured.
	SMActive  float64
	Telemetry bool
}

// unixSec floors t to whole Unix seconds, clamping times before 1970 to 0.
func unixSec(t time.Time) int64 {
	s := t.Unix()
	if s < 0 {
		return 0
	}
	return s
}

// cumulative is F(s) = round-half-up(price × s / 3600): the node's cost
// from its origin to s whole seconds after it, which is what a per-second
// bill charges for s seconds. Costs of intervals are differences of F, so
// they telescope.
func cumulative(pricePerHour model.Money, sec int64) uint64 {
	if pricePerHour <= 0 || sec <= 0 {
		return 0
	}
	return mulDivHalfUp(uint64(pricePerHour), uint64(sec), 3600)
}

// NodeCost is what a node priced at pricePerHour (micro-dollars per hour)
// costs over [from, to), with times floored to whole Unix seconds:
//
//	F(to) − F(from), where F(s) = round-half-up(pricePerHour × s / 3600)
//
// Because it is a difference of one cumulative function, the costs of
// adjacent intervals sum exactly to the cost of their union, so the
// metering cadence never changes a node's total. Rounding is within half
// a micro-dollar of the real-valued price × time, and never accumulates.
// Meter counts a node with an Origin from that origin instead of the Unix
// epoch (nodeCost), so its total is F(seconds billed), a provider's bill.
func NodeCost(pricePerHour model.Money, from, to time.Time) model.Money {
	return nodeCost(pricePerHour, unixSec(from), unixSec(to))
}

// nodeCost is F(b) − F(a) for seconds a ≤ b on one node's clock.
func nodeCost(pricePerHour model.Money, a, b int64) model.Money {
	if b <= a {
		return 0
	}
	return model.Money(cumulative(pricePerHour, b) - cumulative(pricePerHour, a))
}

// nodeClock counts a node's time in whole seconds since its origin (whole
// Unix seconds when it has none); times before the origin count as 0.
type nodeClock struct{ origin time.Time }

func (k nodeClock) sec(t time.Time) int64 {
	if k.origin.IsZero() {
		return unixSec(t)
	}
	d := t.Sub(k.origin)
	if d <= 0 {
		return 0
	}
	return int64(d / time.Second)
}

// instant is the time s seconds on the clock, clamped to [lo, hi] (the
// pass's bounds) so an entry never leaves its pass.
func (k nodeClock) instant(s int64, lo, hi time.Time) time.Time {
	var t time.Time
	if k.origin.IsZero() {
		t = time.Unix(s, 0)
	} else {
		t = k.origin.Add(time.Duration(s) * time.Second)
	}
	if t.Before(lo) {
		t = lo
	}
	if t.After(hi) {
		t = hi
	}
	return t.UTC()
}

// unitsPerWhole scales GPU and CPU amounts to integers for exact splits:
// shares are counted in millionths of a GPU or core.
const unitsPerWhole = 1_000_000

func units(x float64) uint64 {
	if !(x > 0) || math.IsInf(x, 0) {
		return 0
	}
	if x > 1e12 {
		x = 1e12
	}
	return uint64(math.Round(x * unitsPerWhole))
}

// Meter attributes every second of every node in [from, to) and returns
// one entry per allocation overlapping the pass (in input order) followed
// by one idle entry, node by node, in input order. Nodes not alive in the
// window produce nothing; an idle entry is produced even when it is $0 so
// idle GPU-seconds are visible.
//
// Attribution, over each stretch of time where the set of allocations on a
// node does not change:
//
//  1. The stretch costs NodeCost(price, start, end).
//  2. On a node with GPUs each allocation's weight is its GPU share. Work
//     holding no GPU takes its CPU share of the GPU capacity nobody holds
//     (so it is never charged for GPUs others use). On a node without GPUs
//     weights are CPU shares. Idle's weight is what is left.
//  3. Shares are counted in millionths; if allocations hold more than the
//     node's capacity (bad data), the denominator becomes their sum and
//     idle gets nothing.
//  4. The cost is split by the largest-remainder method: each party gets
//     floor(cost × weight / total); the micro-dollars left over (fewer
//     than the number of parties) go one each to the largest remainders,
//     ties to the earlier allocation, idle last. Parts therefore sum to the
//     stretch cost exactly and none is negative.
func Meter(nodes []NodeUsage, from, to time.Time) []model.LedgerEntry {
	return AppendMeter(nil, nodes, from, to)
}

// AppendMeter is Meter appending to dst, so a caller metering every minute
// can reuse one buffer (dst[:0]) and allocate nothing in steady state.
func AppendMeter(dst []model.LedgerEntry, nodes []NodeUsage, from, to time.Time) []model.LedgerEntry {
	n := 0
	for i := range nodes {
		n += len(nodes[i].Allocations) + 1
	}
	out := slices.Grow(dst, n)
	var m meterScratch
	for i := range nodes {
		out = m.node(out, &nodes[i], from, to)
	}
	return out
}

// meterScratch holds buffers reused from node to node within one Meter
// call.
type meterScratch struct {
	bounds []int64
	starts []int64
	ends   []int64
	w      []uint64
	rem    []uint64
	rems   []uint64
	idx    []int
}

func clip(k nodeClock, start, end time.Time, lo, hi int64) (int64, int64) {
	a, b := lo, hi
	if !start.IsZero() {
		a = max(a, k.sec(start))
	}
	if !end.IsZero() {
		b = min(b, k.sec(end))
	}
	return a, b
}

func (m *meterScratch) node(out []model.LedgerEntry, nu *NodeUsage, fromT, toT time.Time) []model.LedgerEntry {
	clk := nodeClock{origin: nu.Origin}
	lo, hi := clip(clk, nu.Start, nu.End, clk.sec(fromT), clk.sec(toT))
	if hi <= lo {
		return out
	}
	at := func(s int64) time.Time { return clk.instant(s, fromT, toT) }
	k := len(nu.Allocations)
	m.bounds = append(m.bounds[:0], lo, hi)
	m.starts, m.ends = m.starts[:0], m.ends[:0]
	for i := range nu.Allocations {
		a, b := clip(clk, nu.Allocations[i].Start, nu.Allocations[i].End, lo, hi)
		if b < a {
			b = a
		}
		m.starts, m.ends = append(m.starts, a), append(m.ends, b)
		if a < b {
			m.bounds = append(m.bounds, a, b)
		}
	}
	slices.Sort(m.bounds)
	m.bounds = slices.Compact(m.bounds)

	base := len(out)
	for i := range nu.Allocations {
		if m.starts[i] >= m.ends[i] {
			continue
		}
		a := &nu.Allocations[i]
		e := nu.entry(model.LedgerAllocation, m.starts[i], m.ends[i], at)
		e.JobID, e.AttemptID, e.Attempt = a.JobID, a.AttemptID, a.Attempt
		e.Project, e.User, e.Queue, e.Tags = a.Project, a.User, a.Queue, a.Tags
		e.GPUs, e.CPU = a.GPUs, a.CPU
		e.GPUSeconds = a.GPUs * float64(e.Seconds)
		e.SMActive, e.Telemetry = a.SMActive, a.Telemetry
		out = append(out, e)
	}
	// Map from allocation index to its entry (allocations with no overlap
	// have none).
	m.idx = m.idx[:0]
	for i, j := 0, base; i < k; i++ {
		if m.starts[i] < m.ends[i] {
			m.idx = append(m.idx, j)
			j++
		} else {
			m.idx = append(m.idx, -1)
		}
	}
	idle := nu.entry(model.LedgerIdle, lo, hi, at)
	idle.GPUSeconds = nu.GPUs * float64(hi-lo)
	for j := base; j < len(out); j++ {
		idle.GPUSeconds -= out[j].GPUSeconds
	}
	if idle.GPUSeconds < 0 {
		idle.GPUSeconds = 0
	}

	gpuCap, cpuCap := units(nu.GPUs), units(nu.CPU)
	for s := 0; s+1 < len(m.bounds); s++ {
		a, b := m.bounds[s], m.bounds[s+1]
		c := uint64(nodeCost(nu.PricePerHour, a, b))
		if c == 0 {
			continue
		}
		// Weights of the allocations active over [a, b), then idle.
		m.w = m.w[:0]
		// cpuHeld counts CPU of GPU-less work (what competes for the free
		// GPU share); cpuAll counts all CPU (the shares on a CPU-only node).
		var held, cpuHeld, cpuAll uint64
		for i := 0; i < k; i++ {
			var g, cp uint64
			if m.starts[i] <= a && m.ends[i] >= b {
				g, cp = units(nu.Allocations[i].GPUs), units(nu.Allocations[i].CPU)
			}
			held += g
			cpuAll += cp
			if g == 0 {
				cpuHeld += cp
			}
			m.w = append(m.w, g, cp)
		}
		var total uint64
		if gpuCap > 0 {
			total = max(gpuCap, held)
			free := total - held
			cpuDen := max(cpuCap, cpuHeld)
			for i := 0; i < k; i++ {
				g, cp := m.w[2*i], m.w[2*i+1]
				if g == 0 && cp > 0 && free > 0 {
					g = mulDiv(free, cp, cpuDen)
				}
				m.w[i] = g
			}
		} else {
			total = max(cpuCap, cpuAll)
			for i := 0; i < k; i++ {
				m.w[i] = m.w[2*i+1]
			}
		}
		m.w = m.w[:k]
		var used uint64
		for _, w := range m.w {
			used += w
		}
		if total == 0 {
			// No capacity declared and nothing held: all idle.
			idle.Cost += model.Money(c)
			continue
		}
		m.w = append(m.w, total-used) // idle
		parts := m.split(c, total)
		for i := 0; i < k; i++ {
			if parts[i] > 0 {
				out[m.idx[i]].Cost += model.Money(parts[i])
			}
		}
		idle.Cost += model.Money(parts[k])
	}
	for j := base; j < len(out); j++ {
		e := &out[j]
		if e.Telemetry {
			e.EffectiveCost = effective(e.Cost, e.SMActive)
		}
	}
	return append(out, idle)
}

// split divides c by the weights in m.w (summing to total) with the
// largest-remainder method, returning parts in m.rem's storage.
func (m *meterScratch) split(c, total uint64) []uint64 {
	parts := m.rem[:0]
	rems := m.rems[:0]
	var sum uint64
	for _, w := range m.w {
		q, r := mulDivRem(c, w, total)
		parts = append(parts, q)
		rems = append(rems, r)
		sum += q
	}
	for left := c - sum; left > 0; left-- {
		best := -1
		for i, r := range rems {
			if m.w[i] > 0 && (best < 0 || r > rems[best]) {
				best = i
			}
		}
		parts[best]++
		rems[best] = 0
		// A zero remainder can only win if all remaining are zero; the
		// weights guarantee left < number of non-zero remainders.
	}
	m.rem, m.rems = parts, rems
	return parts
}

func effective(c model.Money, sm float64) model.Money {
	if !(sm > 0) {
		return 0
	}
	if sm >= 1 {
		return c
	}
	return model.Money(math.Floor(float64(c)*sm + 0.5))
}

// entry is an entry of the node over its clock's seconds [a, b); at turns
// them into instants.
func (nu *NodeUsage) entry(k model.LedgerKind, a, b int64, at func(int64) time.Time) model.LedgerEntry {
	return model.LedgerEntry{
		Kind: k, NodeID: nu.NodeID, Pool: nu.Pool, Provider: nu.Provider, Region: nu.Region,
		InstanceType: nu.InstanceType, GPUModel: nu.GPUModel, CapacityType: nu.CapacityType,
		PriceSource: nu.PriceSource, PricePerHour: nu.PricePerHour,
		From: at(a), To: at(b), Seconds: b - a,
	}
}
