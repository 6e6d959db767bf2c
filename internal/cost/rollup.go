package cost

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Dims are the attributes a rollup keeps for each cell: everything a
// report may group or filter by, except the node and the job (per-job cost
// has its own index; see Rollup.Job).
type Dims struct {
	Kind         model.LedgerKind
	Project      string
	User         string
	Queue        string
	Tags         map[string]string
	CapacityType model.CapacityType
	PriceSource  model.PriceSource
	GPUModel     string
	Provider     string
	Region       string
	Pool         string
}

// Cell is the money and usage of one set of Dims in one hour or day.
type Cell struct {
	Cost model.Money
	// IdleShare is, for allocation cells, the part of their nodes' idle
	// cost apportioned to them; for idle cells, the part of Cost that was
	// apportioned away (so Cost − IdleShare is idle on empty nodes).
	IdleShare model.Money
	// EffectiveCost is Σ Cost × SM-active over entries with telemetry, and
	// MeasuredCost the Cost of those entries.
	EffectiveCost model.Money
	MeasuredCost  model.Money
	GPUSeconds    float64
	Seconds       int64
}

func (c *Cell) add(o Cell) {
	c.Cost += o.Cost
	c.IdleShare += o.IdleShare
	c.EffectiveCost += o.EffectiveCost
	c.MeasuredCost += o.MeasuredCost
	c.GPUSeconds += o.GPUSeconds
	c.Seconds += o.Seconds
}

type bucket struct {
	idx   map[uint32]int32
	dims  []uint32
	cells []Cell
}

func (b *bucket) at(d uint32) *Cell {
	i, ok := b.idx[d]
	if !ok {
		i = int32(len(b.cells))
		b.idx[d] = i
		b.dims = append(b.dims, d)
		b.cells = append(b.cells, Cell{})
	}
	return &b.cells[i]
}

// JobCost is one job's cost across all its attempts.
type JobCost struct {
	JobID         string
	Total         model.Money
	ByAttempt     map[int]model.Money
	EffectiveCost model.Money
	MeasuredCost  model.Money
	GPUSeconds    float64
	First, Last   time.Time
	// Points is the running total over time, at most maxJobPoints (the
	// job page's cost plot): after each metered stretch, thinned to every
	// other point as it grows. Rebuilt from the stored ledger at start.
	Points []JobCostPoint
}

// JobCostPoint is a job's cost metered up to At.
type JobCostPoint struct {
	At time.Time `json:"at"`
	// Total and EffectiveCost are cumulative; EffectiveCost counts only
	// the seconds telemetry measured, MeasuredCost what they cost.
	Total         model.Money `json:"total"`
	EffectiveCost model.Money `json:"effectiveCost"`
	MeasuredCost  model.Money `json:"measuredCost"`
}

// maxJobPoints bounds JobCost.Points.
const maxJobPoints = 128

func (j *JobCost) addPoint(at time.Time) {
	p := JobCostPoint{At: at, Total: j.Total, EffectiveCost: j.EffectiveCost, MeasuredCost: j.MeasuredCost}
	if n := len(j.Points); n > 0 && !at.After(j.Points[n-1].At) {
		p.At = j.Points[n-1].At
		j.Points[n-1] = p
		return
	}
	if len(j.Points) == maxJobPoints {
		keep := j.Points[:0]
		for i := 0; i < len(j.Points); i += 2 {
			keep = append(keep, j.Points[i])
		}
		j.Points = keep
	}
	j.Points = append(j.Points, p)
}

// Rollup is hourly and daily aggregates of ledger entries, maintained
// incrementally by Add; reports read only the rollup. It is not safe for
// concurrent use; the controller owns one and publishes copies or guards
// it. The zero value is not ready; use NewRollup.
type Rollup struct {
	dimIDs map[string]uint32
	dims   []Dims
	hours  map[int64]*bucket // key: Unix hour
	days   map[int64]*bucket // key: Unix day (UTC)
	jobs   map[string]*JobCost
	rows   int64
	key    strings.Builder
	shares []model.Money
}

// NewRollup returns an empty rollup.
func NewRollup() *Rollup {
	return &Rollup{dimIDs: map[string]uint32{}, hours: map[int64]*bucket{}, days: map[int64]*bucket{}, jobs: map[string]*JobCost{}}
}

// Rows is how many entries have been added.
func (r *Rollup) Rows() int64 { return r.rows }

func (r *Rollup) intern(e *model.LedgerEntry) uint32 {
	k := &r.key
	k.Reset()
	for _, s := range []string{string(e.Kind), e.Project, e.User, e.Queue, string(e.CapacityType), string(e.PriceSource), e.GPUModel, e.Provider, e.Region, e.Pool} {
		k.WriteString(s)
		k.WriteByte(0)
	}
	if len(e.Tags) > 0 {
		for _, t := range slices.Sorted(maps.Keys(e.Tags)) {
			k.WriteString(t)
			k.WriteByte(1)
			k.WriteString(e.Tags[t])
			k.WriteByte(0)
		}
	}
	if id, ok := r.dimIDs[k.String()]; ok {
		return id
	}
	id := uint32(len(r.dims))
	r.dimIDs[k.String()] = id
	r.dims = append(r.dims, Dims{Kind: e.Kind, Project: e.Project, User: e.User, Queue: e.Queue, Tags: e.Tags,
		CapacityType: e.CapacityType, PriceSource: e.PriceSource, GPUModel: e.GPUModel, Provider: e.Provider,
		Region: e.Region, Pool: e.Pool})
	return id
}

func bucketAt(m map[int64]*bucket, k int64) *bucket {
	b := m[k]
	if b == nil {
		b = &bucket{idx: map[uint32]int32{}}
		m[k] = b
	}
	return b
}

// Add folds entries into the rollup. Pass whole Meter passes (all entries
// of a node together, its idle entry after its allocations, as Meter
// returns them): each node's idle cost in the pass is apportioned to the
// allocation entries of that node in the same call, by their cost, with
// the largest-remainder method (by GPU-seconds when they cost nothing),
// so shared idle sums exactly to the idle it came from.
//
// An entry is counted in the hour (and day) its From falls in; a pass
// that crosses an hour boundary is wholly in its first hour. The
// controller meters passes that end on hour boundaries, so hourly figures
// are exact.
func (r *Rollup) Add(entries []model.LedgerEntry) {
	for start := 0; start < len(entries); {
		end := start
		for end < len(entries) && entries[end].NodeID == entries[start].NodeID && entries[end].Kind == model.LedgerAllocation {
			end++
		}
		var idle *model.LedgerEntry
		if end < len(entries) && entries[end].NodeID == entries[start].NodeID && entries[end].Kind == model.LedgerIdle {
			idle = &entries[end]
		}
		r.shares = shareIdle(r.shares[:0], entries[start:end], idle)
		var shared model.Money
		for i := start; i < end; i++ {
			s := r.shares[i-start]
			shared += s
			r.addOne(&entries[i], s)
		}
		if idle != nil {
			r.addOne(idle, shared)
			end++
		}
		if end == start { // defensive: never loop forever on odd input
			end++
		}
		start = end
	}
}

func shareIdle(dst []model.Money, allocs []model.LedgerEntry, idle *model.LedgerEntry) []model.Money {
	for range allocs {
		dst = append(dst, 0)
	}
	if idle == nil || idle.Cost <= 0 || len(allocs) == 0 {
		return dst
	}
	var total uint64
	w := make([]uint64, len(allocs))
	for i := range allocs {
		w[i] = uint64(allocs[i].Cost)
		total += w[i]
	}
	if total == 0 {
		for i := range allocs {
			w[i] = units(allocs[i].GPUSeconds)
			total += w[i]
		}
	}
	if total == 0 {
		return dst
	}
	c := uint64(idle.Cost)
	rems := make([]uint64, len(allocs))
	var sum uint64
	for i := range allocs {
		q, rem := mulDivRem(c, w[i], total)
		dst[i], rems[i] = model.Money(q), rem
		sum += q
	}
	for left := c - sum; left > 0; left-- {
		best := 0
		for i := range rems {
			if rems[i] > rems[best] {
				best = i
			}
		}
		dst[best]++
		rems[best] = 0
	}
	return dst
}

func (r *Rollup) addOne(e *model.LedgerEntry, share model.Money) {
	r.rows++
	d := r.intern(e)
	c := Cell{Cost: e.Cost, IdleShare: share, GPUSeconds: e.GPUSeconds, Seconds: e.Seconds}
	if e.Telemetry {
		c.EffectiveCost, c.MeasuredCost = e.EffectiveCost, e.Cost
	}
	sec := e.From.Unix()
	bucketAt(r.hours, floorDiv(sec, 3600)).at(d).add(c)
	bucketAt(r.days, floorDiv(sec, 86400)).at(d).add(c)
	if e.Kind != model.LedgerAllocation || e.JobID == "" {
		return
	}
	j := r.jobs[e.JobID]
	if j == nil {
		j = &JobCost{JobID: e.JobID, ByAttempt: map[int]model.Money{}, First: e.From, Last: e.To}
		r.jobs[e.JobID] = j
	}
	j.Total += e.Cost
	j.ByAttempt[e.Attempt] += e.Cost
	j.EffectiveCost += c.EffectiveCost
	j.MeasuredCost += c.MeasuredCost
	j.GPUSeconds += e.GPUSeconds
	if e.From.Before(j.First) {
		j.First = e.From
	}
	if e.To.After(j.Last) {
		j.Last = e.To
	}
	j.addPoint(e.To)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Job returns one job's cost across all its attempts.
func (r *Rollup) Job(id string) (JobCost, bool) {
	j, ok := r.jobs[id]
	if !ok {
		return JobCost{}, false
	}
	c := *j
	c.ByAttempt = maps.Clone(j.ByAttempt)
	c.Points = slices.Clone(j.Points)
	return c, true
}

// Spend is the allocation cost (not idle, not idle shares) of work in
// scope in [from, to), read at hourly resolution: from is floored and to
// ceiled to the hour. Budgets compare this against their amount.
func (r *Rollup) Spend(s model.BudgetScope, from, to time.Time) model.Money {
	var total model.Money
	r.each(from, to, func(_ int64, _ uint32, d *Dims, c *Cell) {
		if d.Kind == model.LedgerAllocation && s.Matches(d.Project, d.Queue, d.Tags) {
			total += c.Cost
		}
	})
	return total
}

// DailySpend is Spend per UTC day for days [from, from+n): the series the
// forecast reads.
func (r *Rollup) DailySpend(s model.BudgetScope, from time.Time, n int) []model.Money {
	out := make([]model.Money, n)
	day0 := floorDiv(from.Unix(), 86400)
	for i := range out {
		if b := r.days[day0+int64(i)]; b != nil {
			for j, id := range b.dims {
				d := &r.dims[id]
				if d.Kind == model.LedgerAllocation && s.Matches(d.Project, d.Queue, d.Tags) {
					out[i] += b.cells[j].Cost
				}
			}
		}
	}
	return out
}

// each visits every cell in [from, to): daily buckets where both ends are
// midnight UTC, hourly otherwise (ends rounded outwards to the hour). The
// first argument is the bucket's start in Unix seconds.
func (r *Rollup) each(from, to time.Time, fn func(start int64, id uint32, d *Dims, c *Cell)) {
	f, t := from.Unix(), to.Unix()
	if f%86400 == 0 && t%86400 == 0 {
		r.walk(r.days, f/86400, t/86400, 86400, fn)
		return
	}
	r.walk(r.hours, floorDiv(f, 3600), -floorDiv(-t, 3600), 3600, fn)
}

func (r *Rollup) walk(m map[int64]*bucket, lo, hi, size int64, fn func(int64, uint32, *Dims, *Cell)) {
	if hi-lo > int64(len(m)) {
		// Sparse: walk the buckets present rather than every slot.
		keys := make([]int64, 0, len(m))
		for k := range m {
			if k >= lo && k < hi {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			r.visit(m[k], k*size, fn)
		}
		return
	}
	for k := lo; k < hi; k++ {
		if b := m[k]; b != nil {
			r.visit(b, k*size, fn)
		}
	}
}

func (r *Rollup) visit(b *bucket, start int64, fn func(int64, uint32, *Dims, *Cell)) {
	for i, id := range b.dims {
		fn(start, id, &r.dims[id], &b.cells[i])
	}
}
