package efficiency

import (
	"math"
	"time"
)

// Resolution and reach of a History.
const (
	FineWidth     = 10 * time.Second // fine buckets …
	FineBuckets   = 360              // … for the last hour
	CoarseWidth   = 5 * time.Minute  // coarse buckets …
	CoarseBuckets = 288              // … for the last 24 hours
)

// metric indexes what a bucket keeps of its observations: the values
// Classify reads (SM occupancy and mean memory are not judged; peak memory
// is kept for the whole attempt apart).
type metric uint8

const (
	mSM metric = iota
	mTensor
	mDRAM
	mUtil
	mIOWait
	mSMSq // SM active squared, for the burstiness of SM activity
	// Byte rates from here on; the ones above are fractions, 0–1.
	mPCIeRX
	mPCIeTX
	mNVLink
	numMetrics
)

// Each tier keeps its first-observation offsets in units small enough to
// fit a bucket's width in a uint16 and exact for whole-second times.
const (
	fineUnit   = time.Millisecond
	coarseUnit = 10 * time.Millisecond
)

// slot is one closed bucket of a ring: how many observations it took,
// when the first came, and the mean of each value over them, quantised
// to 16 bits (fractions linearly, byte rates on a log scale, see quant).
// At 28 bytes it is what keeps a History small.
type slot struct {
	period  uint32 // period number minus the tier's base, plus one; 0 is empty
	first   uint16 // first observation after the period's start, in tier units
	n       uint16 // observations, saturating
	present uint16 // bit m: mean[m] holds a value
	mean    [numMetrics]uint16
}

// acc is a tier's open bucket, the newest period, summed exactly; it is
// quantised into a slot when an observation of a later period arrives.
type acc struct {
	period  int64
	firstAt int64 // unix nanoseconds of its first observation
	n       int
	cnt     [numMetrics]uint32
	sum     [numMetrics]float64
}

// tier is one resolution of a History: its open bucket and the period of
// its first observation, which slots count from.
type tier struct {
	open acc
	base int64
}

// History is a bounded series of one attempt's observations: a ring of
// 360 buckets of 10 s (the last hour) and one of 288 buckets of 5 min (the
// last 24 hours). A bucket keeps the count and quantised means of its
// observations, not samples, so a History has a fixed size of about 18 KB
// (648 buckets of 28 bytes) however long the attempt runs, whatever the
// sampling interval. Each ring's newest bucket is summed exactly until its
// period ends. It also keeps the peak memory fraction and the first and
// last observation times over the attempt's life.
//
// Observations must arrive in time order; one older than the newest is
// dropped. A History is not safe for concurrent use.
type History struct {
	fine    [FineBuckets]slot
	coarse  [CoarseBuckets]slot
	tiers   [2]tier // fine, coarse
	first   time.Time
	last    time.Time
	peakMem float64 // NaN until a memory fraction is seen
	obs     int64
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{peakMem: math.NaN()} }

// First and Last return the times of the first and newest observations
// (zero before any).
func (h *History) First() time.Time { return h.first }

// Last returns the time of the newest observation.
func (h *History) Last() time.Time { return h.last }

// Len returns how many observations the history has taken.
func (h *History) Len() int64 { return h.obs }

// PeakMemory returns the largest used/total memory fraction seen on any of
// the attempt's GPUs, and false before one is seen.
func (h *History) PeakMemory() (float64, bool) { return h.peakMem, !math.IsNaN(h.peakMem) }

// Add records an observation. It reports false, recording nothing, when
// the observation is older than the newest one.
func (h *History) Add(o Observation) bool {
	if !h.last.IsZero() && o.Time.Before(h.last) {
		return false
	}
	t := o.Time.UnixNano()
	if h.first.IsZero() {
		h.first = o.Time
		for i := range h.tiers {
			_, width, _ := h.tier(i)
			h.tiers[i].base = floorDiv(t, int64(width))
			h.tiers[i].open = acc{period: h.tiers[i].base, firstAt: t}
		}
	}
	h.last = o.Time
	h.obs++
	if !math.IsNaN(o.MemUsed) && (math.IsNaN(h.peakMem) || o.MemUsed > h.peakMem) {
		h.peakMem = o.MemUsed
	}
	sq := o.SMActive * o.SMActive
	vals := [numMetrics]float64{
		mSM: o.SMActive, mTensor: o.TensorActive, mDRAM: o.DRAMActive, mUtil: o.GPUUtil, mIOWait: o.HostIOWait,
		mSMSq: sq, mPCIeRX: o.PCIeRX, mPCIeTX: o.PCIeTX, mNVLink: o.NVLink,
	}
	for i := range h.tiers {
		ring, width, unit := h.tier(i)
		tr := &h.tiers[i]
		if p := floorDiv(t, int64(width)); p != tr.open.period {
			tr.close(ring, width, unit)
			tr.open = acc{period: p, firstAt: t}
		}
		tr.open.add(&vals)
	}
	return true
}

// tier returns tier i's ring, bucket width and offset unit.
func (h *History) tier(i int) (ring []slot, width, unit time.Duration) {
	if i == 0 {
		return h.fine[:], FineWidth, fineUnit
	}
	return h.coarse[:], CoarseWidth, coarseUnit
}

func (a *acc) add(vals *[numMetrics]float64) {
	if a.n == math.MaxUint16 {
		return // a flood of observations in one bucket; the sums already speak
	}
	a.n++
	for m, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		a.cnt[m]++
		a.sum[m] += v
	}
}

// close quantises the open bucket into its slot of ring.
func (tr *tier) close(ring []slot, width, unit time.Duration) {
	a := &tr.open
	if a.n == 0 {
		return
	}
	s := slot{period: uint32(a.period - tr.base + 1), n: uint16(a.n),
		first: uint16((a.firstAt - a.period*int64(width)) / int64(unit))}
	for m := range numMetrics {
		if a.cnt[m] > 0 {
			s.present |= 1 << m
			s.mean[m] = quant(m, a.sum[m]/float64(a.cnt[m]))
		}
	}
	ring[mod(a.period, int64(len(ring)))] = s
}

// quant encodes a mean in 16 bits: a fraction linearly (steps of
// 1/65535), a byte rate as the exponent and top 8 mantissa bits of its
// float32 (within 0.2%: a threshold of 50 GB/s is judged to 100 MB/s).
func quant(m metric, v float64) uint16 {
	if m >= mPCIeRX {
		bits := math.Float32bits(float32(min(max(v, 0), math.MaxFloat32)))
		return uint16((bits + 1<<14) >> 15) // rounded; a sign bit of 0 is dropped
	}
	return uint16(math.Round(min(max(v, 0), 1) * math.MaxUint16))
}

// dequant is quant's inverse.
func dequant(m metric, q uint16) float64 {
	if m >= mPCIeRX {
		return float64(math.Float32frombits(uint32(q) << 15))
	}
	return float64(q) / math.MaxUint16
}

// bucketRef is one period of a tier as a window reads it: the open
// bucket (exact sums) or a closed slot (mean × count), decoded per value
// on demand.
type bucketRef struct {
	n       int
	firstAt int64
	a       *acc
	s       *slot
}

// cnt is how many observations had value m.
func (b bucketRef) cnt(m metric) int {
	if b.a != nil {
		return int(b.a.cnt[m])
	}
	if b.s.present&(1<<m) != 0 {
		return b.n
	}
	return 0
}

// sum is the sum of value m over the bucket's observations.
func (b bucketRef) sum(m metric) float64 {
	if b.a != nil {
		return b.a.sum[m]
	}
	if b.s.present&(1<<m) == 0 {
		return 0
	}
	return dequant(m, b.s.mean[m]) * float64(b.n)
}

// bucket returns period p of tier i; false when it holds nothing.
func (h *History) bucket(i int, p int64) (bucketRef, bool) {
	if h.obs == 0 {
		return bucketRef{}, false
	}
	ring, width, unit := h.tier(i)
	tr := &h.tiers[i]
	if a := &tr.open; a.period == p {
		return bucketRef{n: a.n, firstAt: a.firstAt, a: a}, a.n > 0
	}
	s := &ring[mod(p, int64(len(ring)))]
	if s.period == 0 || int64(s.period) != p-tr.base+1 {
		return bucketRef{}, false
	}
	return bucketRef{n: int(s.n), firstAt: p*int64(width) + int64(s.first)*int64(unit), s: s}, true
}

// stats aggregates buckets over a window.
type stats struct {
	n     int
	cnt   [numMetrics]int
	sum   [numMetrics]float64
	first time.Time // first observation in the window
}

func (s *stats) mean(m metric) float64 {
	if s.cnt[m] == 0 {
		return math.NaN()
	}
	return s.sum[m] / float64(s.cnt[m])
}

// smCV is the coefficient of variation of SM activity over the window's
// observations: its standard deviation over its mean; NaN without data.
func (s *stats) smCV() float64 {
	n := float64(s.cnt[mSM])
	if n < 2 {
		return math.NaN()
	}
	mean := s.sum[mSM] / n
	if mean <= 0 {
		return 0
	}
	v := s.sum[mSMSq]/n - mean*mean
	return math.Sqrt(math.Max(v, 0)) / mean
}

// window aggregates the observations in (now-d, now], from the fine
// buckets when the window fits in the last hour, else the coarse ones. It
// is exact to the width of a bucket.
func (h *History) window(now time.Time, d time.Duration) stats {
	ti := 0
	if d > FineWidth*FineBuckets {
		ti = 1
	}
	ring, width, _ := h.tier(ti)
	var s stats
	hi := floorDiv(now.UnixNano(), int64(width))
	lo := floorDiv(now.Add(-d).UnixNano(), int64(width)) + 1
	if span := int64(len(ring)); hi-lo+1 > span {
		lo = hi - span + 1
	}
	for p := lo; p <= hi; p++ {
		b, ok := h.bucket(ti, p)
		if !ok {
			continue
		}
		if s.n == 0 {
			s.first = time.Unix(0, b.firstAt)
		}
		s.n += b.n
		for m := range numMetrics {
			s.cnt[m] += b.cnt(m)
			s.sum[m] += b.sum(m)
		}
	}
	return s
}

// lowSince walks back from now over consecutive buckets whose mean
// activity (SM active, else GPU utilisation) is below limit, and returns
// the first observation time of the earliest one; zero when the newest
// bucket with data is not below it. A stretch without data longer than
// maxGap ends the walk. The fine buckets are walked first, then the coarse
// ones before them.
func (h *History) lowSince(now time.Time, limit float64, maxGap time.Duration) time.Time {
	var since time.Time
	edge := now.UnixNano() // walk buckets that start before edge
	gapFrom := h.last      // the newest observation not yet in a gap
	for ti := range h.tiers {
		ring, width, _ := h.tier(ti)
		w := int64(width)
		hi := floorDiv(edge-1, w)
		for p := hi; p > hi-int64(len(ring)); p-- {
			b, ok := h.bucket(ti, p)
			if !ok {
				if gapFrom.Sub(time.Unix(0, p*w)) > maxGap {
					return since
				}
				continue
			}
			m := mSM
			if b.cnt(mSM) == 0 {
				m = mUtil
			}
			if c := b.cnt(m); c == 0 || b.sum(m)/float64(c) >= limit {
				return since
			}
			since = time.Unix(0, b.firstAt)
			gapFrom = since
			edge = p * w
		}
	}
	return since
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
