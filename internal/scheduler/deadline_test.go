package scheduler

import (
	"math"
	"testing"
	"time"
)

// TestFinishProbability checks the deadline model against values worked
// out by hand from the Poisson distribution (see deadline.go).
func TestFinishProbability(t *testing.T) {
	t.Parallel()
	h := time.Hour
	tests := map[string]struct {
		work, window      time.Duration
		rate              float64
		interval, restart time.Duration
		want              float64
	}{
		"no interruptions":       {work: 10 * h, window: 10 * h, rate: 0, want: 1},
		"no work":                {work: 0, window: h, rate: 5, want: 1},
		"does not fit":           {work: 10 * h, window: 9 * h, rate: 0.01, want: 0},
		"no slack: e^-λW":        {work: 10 * h, window: 10 * h, rate: 0.1, interval: h, restart: 30 * time.Minute, want: math.Exp(-1)},
		"slack for two losses":   {work: 10 * h, window: 12 * h, rate: 0.1, interval: h, restart: 30 * time.Minute, want: 0.8794870987836302},
		"slack for ten losses":   {work: 10 * h, window: 20 * h, rate: 0.1, interval: h, restart: 30 * time.Minute, want: 0.9999916917756316},
		"no checkpoints":         {work: 4 * h, window: 8 * h, rate: 0.05, want: 0.9920736681327463},
		"8 instances, 7h left":   {work: 6 * h, window: 7 * h, rate: 0.16, interval: 30 * time.Minute, restart: 5 * time.Minute, want: 0.9727557883384403},
		"8 instances, 6h20m":     {work: 6 * h, window: 6*h + 20*time.Minute, rate: 0.16, interval: 30 * time.Minute, restart: 5 * time.Minute, want: 0.7308539674973169},
		"huge mean, no NaN":      {work: 100 * h, window: 200 * h, rate: 100, interval: 6 * time.Minute, want: 0},
		"far past the mean":      {work: h, window: 1000 * h, rate: 0.01, interval: time.Minute, restart: time.Second, want: 1},
		"interval above runtime": {work: 4 * h, window: 8 * h, rate: 0.05, interval: 10 * h, want: 0.9920736681327463},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := FinishProbability(tc.work, tc.window, tc.rate, tc.interval, tc.restart)
			if math.IsNaN(got) || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("FinishProbability = %.12f, want %.12f", got, tc.want)
			}
		})
	}
}

// TestFinishProbabilityMonotone: more slack never lowers the probability,
// a higher rate never raises it.
func TestFinishProbabilityMonotone(t *testing.T) {
	t.Parallel()
	work, interval, restart := 6*time.Hour, 30*time.Minute, 5*time.Minute
	prev := 0.0
	for w := work; w <= 12*time.Hour; w += 7 * time.Minute {
		p := FinishProbability(work, w, 0.16, interval, restart)
		if p < prev-1e-12 {
			t.Fatalf("window %s: p = %.6f, below %.6f at less slack", w, p, prev)
		}
		prev = p
	}
	prev = 1
	for rate := 0.0; rate <= 2; rate += 0.05 {
		p := FinishProbability(work, 8*time.Hour, rate, interval, restart)
		if p > prev+1e-12 {
			t.Fatalf("rate %.2f: p = %.6f, above %.6f at a lower rate", rate, p, prev)
		}
		prev = p
	}
}

// TestSpotRisk: the verdict on one spot offer or node, with the job's and
// the pool's restart times and the rule for an unknown rate.
func TestSpotRisk(t *testing.T) {
	t.Parallel()
	h := time.Hour
	tests := map[string]struct {
		d           deadlineReq
		rate        float64
		instances   int
		poolRestart time.Duration
		wantOK      bool
	}{
		"8 instances, 7h left":          {d: deadlineReq{work: 6 * h, window: 7 * h, interval: 30 * time.Minute}, rate: 0.02, instances: 8, wantOK: true},
		"8 instances, 6h20m left":       {d: deadlineReq{work: 6 * h, window: 6*h + 20*time.Minute, interval: 30 * time.Minute}, rate: 0.02, instances: 8, wantOK: false},
		"one instance, 6h20m left":      {d: deadlineReq{work: 6 * h, window: 6*h + 20*time.Minute, interval: 30 * time.Minute}, rate: 0.02, instances: 1, wantOK: true}, // a gang of 8 is interrupted 8 times as often
		"a slow pool restart":           {d: deadlineReq{work: 6 * h, window: 7 * h, interval: 30 * time.Minute}, rate: 0.02, instances: 8, poolRestart: 2 * h, wantOK: false},
		"the job's restart wins":        {d: deadlineReq{work: 6 * h, window: 7 * h, interval: 30 * time.Minute, restart: 5 * time.Minute}, rate: 0.02, instances: 8, poolRestart: 2 * h, wantOK: true},
		"unknown rate, room for one":    {d: deadlineReq{work: 2 * h, window: 2*h + 20*time.Minute, interval: 30 * time.Minute}, wantOK: true},
		"unknown rate, no room for one": {d: deadlineReq{work: 2 * h, window: 2*h + 10*time.Minute, interval: 30 * time.Minute}, wantOK: false},
		"deadline passed":               {d: deadlineReq{work: 2 * h, window: -h}, rate: 0.01, instances: 1, wantOK: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if p, ok := spotRisk(tc.d, tc.rate, tc.instances, tc.poolRestart); ok != tc.wantOK {
				t.Errorf("spotRisk = %.4f, %v; want ok %v", p, ok, tc.wantOK)
			}
		})
	}
}
