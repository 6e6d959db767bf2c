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

// metric indexes a bucket's sums.
type metric uint8

const (
	mSM metric = iota
	mOccupancy
	mTensor
	mDRAM
	mUtil
	mMem
	mPCIeRX
	mPCIeTX
	mNVLink
	mIOWait
	numMetrics
)

// bucket aggregates the observations of one period. float32 sums keep it
// small; a bucket sums at most a few hundred values in 0–1 or bytes/s, well
// inside float32's precision for these judgements.
type bucket struct {
	period  int64 // period number since the epoch; 0 with n == 0 is empty
	firstAt int64 // unix nanoseconds of its first observation
	n       uint16
	cnt     [numMetrics]uint16
	sum     [numMetrics]float32
	sumSqSM float32 // for the burstiness of SM activity
	maxMem  float32
}

// History is a bounded series of one attempt's observations: 360 buckets
// of 10 s (the last hour) and 288 buckets of 5 min (the last 24 hours),
// each holding sums and counts, not samples. Its size is fixed at
// creation: about 70 KB however long the attempt runs (648 buckets of
// ~104 bytes), whatever the sampling interval. It also keeps the peak
// memory fraction and the first and last observation times over the
// attempt's life.
//
// Observations must arrive in time order; one older than the newest is
// dropped. A History is not safe for concurrent use.
type History struct {
	fine    [FineBuckets]bucket
	coarse  [CoarseBuckets]bucket
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
	if h.first.IsZero() {
		h.first = o.Time
	}
	h.last = o.Time
	h.obs++
	if !math.IsNaN(o.MemUsed) && (math.IsNaN(h.peakMem) || o.MemUsed > h.peakMem) {
		h.peakMem = o.MemUsed
	}
	vals := [numMetrics]float64{
		mSM: o.SMActive, mOccupancy: o.SMOccupancy, mTensor: o.TensorActive, mDRAM: o.DRAMActive,
		mUtil: o.GPUUtil, mMem: o.MemUsed, mPCIeRX: o.PCIeRX, mPCIeTX: o.PCIeTX, mNVLink: o.NVLink,
		mIOWait: o.HostIOWait,
	}
	t := o.Time.UnixNano()
	addTo(slot(h.fine[:], t, FineWidth), t, FineWidth, &vals)
	addTo(slot(h.coarse[:], t, CoarseWidth), t, CoarseWidth, &vals)
	return true
}

func slot(ring []bucket, t int64, width time.Duration) *bucket {
	p := floorDiv(t, int64(width))
	return &ring[mod(p, int64(len(ring)))]
}

func addTo(b *bucket, t int64, width time.Duration, vals *[numMetrics]float64) {
	p := floorDiv(t, int64(width))
	if b.period != p || b.n == 0 {
		*b = bucket{period: p, firstAt: t}
	}
	if b.n == math.MaxUint16 {
		return // a flood of observations in one bucket; the sums already speak
	}
	b.n++
	for m, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		b.cnt[m]++
		b.sum[m] += float32(v)
		if metric(m) == mSM {
			b.sumSqSM += float32(v * v)
		}
		if metric(m) == mMem && float32(v) > b.maxMem {
			b.maxMem = float32(v)
		}
	}
}

// stats aggregates buckets over a window.
type stats struct {
	n       int
	cnt     [numMetrics]int
	sum     [numMetrics]float64
	sumSqSM float64
	first   time.Time // first observation in the window
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
	v := s.sumSqSM/n - mean*mean
	return math.Sqrt(math.Max(v, 0)) / mean
}

// window aggregates the observations in (now-d, now], from the fine
// buckets when the window fits in the last hour, else the coarse ones. It
// is exact to the width of a bucket.
func (h *History) window(now time.Time, d time.Duration) stats {
	ring, width := h.fine[:], FineWidth
	if d > FineWidth*FineBuckets {
		ring, width = h.coarse[:], CoarseWidth
	}
	var s stats
	hi := floorDiv(now.UnixNano(), int64(width))
	lo := floorDiv(now.Add(-d).UnixNano(), int64(width)) + 1
	if span := int64(len(ring)); hi-lo+1 > span {
		lo = hi - span + 1
	}
	for p := lo; p <= hi; p++ {
		b := &ring[mod(p, int64(len(ring)))]
		if b.n == 0 || b.period != p {
			continue
		}
		if s.n == 0 {
			s.first = time.Unix(0, b.firstAt)
		}
		s.n += int(b.n)
		for m := range numMetrics {
			s.cnt[m] += int(b.cnt[m])
			s.sum[m] += float64(b.sum[m])
		}
		s.sumSqSM += float64(b.sumSqSM)
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
	for _, tier := range []struct {
		ring  []bucket
		width time.Duration
	}{{h.fine[:], FineWidth}, {h.coarse[:], CoarseWidth}} {
		w := int64(tier.width)
		hi := floorDiv(edge-1, w)
		for p := hi; p > hi-int64(len(tier.ring)); p-- {
			b := &tier.ring[mod(p, int64(len(tier.ring)))]
			if b.n == 0 || b.period != p {
				if gapFrom.Sub(time.Unix(0, p*w)) > maxGap {
					return since
				}
				continue
			}
			m := mSM
			if b.cnt[mSM] == 0 {
				m = mUtil
			}
			if b.cnt[m] == 0 || float64(b.sum[m])/float64(b.cnt[m]) >= limit {
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
