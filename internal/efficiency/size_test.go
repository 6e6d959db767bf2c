package efficiency

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
)

// BenchmarkTrackerBytesPerAttempt measures the heap a Tracker holds per
// live attempt once each has an hour of telemetry (a sample every 10 s,
// what agents send), the figure behind the server's memory per running
// job: live heap after a GC, divided by the attempts.
func BenchmarkTrackerBytesPerAttempt(b *testing.B) {
	const attempts = 1000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := NewTracker(Thresholds{})
		o := obs()
		for s := range 360 {
			o.Time = t0.Add(time.Duration(s) * 10 * time.Second)
			for i := range attempts {
				tr.Add(fmt.Sprintf("att-%04d", i), o)
			}
		}
		tr.Evaluate(o.Time)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/attempts, "bytes/attempt")
		runtime.KeepAlive(tr)
	}
}

func TestQuantRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		m    metric
		v    float64
		tol  float64 // relative for byte rates, absolute for fractions
		want float64
	}{
		{mSM, 0.9, 1.0 / 65535, 0.9},
		{mSM, 0, 0, 0},
		{mSM, 1, 0, 1},
		{mSM, 1.7, 0, 1}, // clamped
		{mIOWait, -0.2, 0, 0},
		{mNVLink, 50e9, 0.002, 50e9},
		{mPCIeTX, 8e9, 0.002, 8e9},
		{mPCIeRX, 1234, 0.002, 1234},
		{mPCIeRX, 0, 0, 0},
		{mNVLink, 1e30, 0.002, 1e30},
	} {
		got := dequant(tt.m, quant(tt.m, tt.v))
		diff := math.Abs(got - tt.want)
		if tt.m >= mPCIeRX && tt.want != 0 {
			diff /= tt.want
		}
		if diff > tt.tol {
			t.Errorf("metric %d: %g came back as %g", tt.m, tt.v, got)
		}
	}
}
