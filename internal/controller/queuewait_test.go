package controller

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQueueWaitCountMatchesPercentile: the queue-wait rule's count (how
// many waits are above the limit, queueWait.p95Over) says "above" exactly
// when the sorted 95th percentile of all the waits (waitP95) is above the
// limit, and then the percentile it reports from the waits above the limit
// alone (queueWait.p95) is that one, over random queues of 1 to 300 waits
// with ties at the limit.
func TestQueueWaitCountMatchesPercentile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	limit := time.Hour
	above := 0
	for i := range 20000 {
		n := 1 + r.IntN(300)
		waits := make([]time.Duration, n)
		var w queueWait
		span := 50 + r.IntN(31) // waits up to 50–80 minutes: p95 near the hour
		for k := range waits {
			waits[k] = time.Duration(r.IntN(span+1)) * time.Minute
			if r.IntN(10) == 0 {
				waits[k] = limit
			}
			w.n++
			if waits[k] > limit {
				w.over = append(w.over, waits[k])
			}
		}
		p95 := waitP95(waits)
		want := p95 > limit
		if w.p95Over() != want {
			t.Fatalf("case %d: %d waits, %d above the limit: count says %v, percentile %s says %v", i, w.n, len(w.over), w.p95Over(), p95, want)
		}
		if want {
			above++
			if got := w.p95(); got != p95 {
				t.Fatalf("case %d: %d waits, %d above the limit: reported percentile %s, want %s", i, w.n, len(w.over), got, p95)
			}
		}
	}
	if above < 1000 || above > 19000 {
		t.Fatalf("%d of 20000 cases above the limit: the cases do not straddle it", above)
	}
	if (&queueWait{}).p95Over() {
		t.Fatal("an empty queue is above the limit")
	}
}

// waitP95 returns the 95th percentile of waits (nearest rank), sorting
// them in place: the reference the rule's counts are checked against.
func waitP95(waits []time.Duration) time.Duration {
	slices.Sort(waits)
	return waits[p95Rank(len(waits))]
}
