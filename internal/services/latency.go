package services

import (
	"sort"
	"time"
)

// latencyBounds are the upper bounds of the latency window's buckets; a
// last bucket holds what is slower.
var latencyBounds = []time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	75 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond,
	300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond,
	time.Second, 1500 * time.Millisecond, 2 * time.Second, 3 * time.Second, 5 * time.Second,
	7500 * time.Millisecond, 10 * time.Second, 15 * time.Second, 20 * time.Second, 30 * time.Second,
	time.Minute,
}

// latencySeconds is how far back the latency window reaches.
const latencySeconds = 30

// latencyWindow is the proxy's latency histogram of one service over the
// last latencySeconds: one histogram per second in a ring, so adding and
// reading a quantile cost a fixed amount however busy the service is.
// Not safe for concurrent use (the Manager's lock guards it).
type latencyWindow struct {
	secs [latencySeconds][]int // per second, len(latencyBounds)+1 counts
	last int64
}

// add counts one request that took d, at now.
func (w *latencyWindow) add(now time.Time, d time.Duration) {
	w.advance(now.Unix())
	s := &w.secs[now.Unix()%latencySeconds]
	if *s == nil {
		*s = make([]int, len(latencyBounds)+1)
	}
	(*s)[sort.Search(len(latencyBounds), func(i int) bool { return d <= latencyBounds[i] })]++
}

// advance clears the seconds that passed since the last one seen.
func (w *latencyWindow) advance(sec int64) {
	if w.last == 0 {
		w.last = sec
		return
	}
	for s := w.last + 1; s <= sec && s <= w.last+latencySeconds; s++ {
		clear(w.secs[s%latencySeconds])
	}
	w.last = max(w.last, sec)
}

// counts sums the window's seconds at now: one count per bucket.
func (w *latencyWindow) counts(now time.Time) []int {
	w.advance(now.Unix())
	counts := make([]int, len(latencyBounds)+1)
	for _, s := range w.secs {
		for i, c := range s {
			counts[i] += c
		}
	}
	return counts
}

// quantile is the q-quantile (0 < q < 1) of the window's latencies at now
// (quantileOf its counts).
func (w *latencyWindow) quantile(now time.Time, q float64) (time.Duration, int) {
	return quantileOf(w.counts(now), q)
}

// quantileOf is the q-quantile (0 < q < 1) of bucket counts (one per
// latency bound, then one slower), interpolated within its bucket as
// Prometheus's histogram_quantile does, and how many requests it rests on.
// One past the last bound reads as that bound.
func quantileOf(counts []int, q float64) (time.Duration, int) {
	n := 0
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, 0
	}
	rank := q * float64(n)
	seen := 0
	for i, c := range counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i >= len(latencyBounds) {
			return latencyBounds[len(latencyBounds)-1], n
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = latencyBounds[i-1]
		}
		frac := (rank - float64(seen)) / float64(c)
		return lo + time.Duration(frac*float64(latencyBounds[i]-lo)), n
	}
	return latencyBounds[len(latencyBounds)-1], n
}

// addCounts adds b's bucket counts to a's (a may be nil); counts of another
// length (a proxy of another version) are ignored.
func addCounts(a, b []int) []int {
	if len(b) != len(latencyBounds)+1 {
		return a
	}
	if a == nil {
		a = make([]int, len(b))
	}
	for i, c := range b {
		a[i] += max(c, 0)
	}
	return a
}
