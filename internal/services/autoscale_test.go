package services

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

func scalerSpec(minR, maxR int, up, down time.Duration) model.ServiceSpec {
	s := model.ServiceSpec{Port: 8000, Template: model.JobSpec{Run: model.RunSpec{Command: []string{"x"}}},
		Replicas:    model.ServiceReplicas{Min: minR, Max: maxR},
		Autoscaling: model.ServiceAutoscaling{Metric: model.ScaleOnInFlight, Target: 2, ScaleUpWindow: model.Duration(up), ScaleDownWindow: model.Duration(down)}}
	s.Default()
	return s
}

func TestDecideScalesFromZeroAtOnce(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	a := NewAutoscaler(scalerSpec(0, 5, time.Minute, time.Minute))
	if d := a.Decide(Load{}, clk.Now()); d.Replicas != 0 {
		t.Fatalf("idle service at min 0: got %d replicas", d.Replicas)
	}
	clk.Advance(time.Second)
	if d := a.Decide(Load{InFlight: 1, Waiting: 1}, clk.Now()); d.Replicas != 1 {
		t.Fatalf("a waiting request must start one replica despite the up window: %+v", d)
	}
}

func TestDecideStabilisationWindows(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	a := NewAutoscaler(scalerSpec(1, 10, 10*time.Second, 30*time.Second))
	if d := a.Decide(Load{Ready: 1, InFlight: 2}, clk.Now()); d.Replicas != 1 {
		t.Fatalf("at target: %+v", d)
	}
	// A burst to 8 in flight (4 replicas) must last the 10 s up window.
	for i := 1; i <= 9; i++ {
		clk.Advance(time.Second)
		if d := a.Decide(Load{Ready: 1, InFlight: 8}, clk.Now()); d.Replicas != 1 {
			t.Fatalf("after %ds of burst: scaled early to %d", i, d.Replicas)
		}
	}
	clk.Advance(2 * time.Second)
	if d := a.Decide(Load{Ready: 1, InFlight: 8}, clk.Now()); d.Replicas != 4 {
		t.Fatalf("after the up window: want 4, got %+v", d)
	}
	// A lull must last the 30 s down window.
	for i := 1; i <= 29; i++ {
		clk.Advance(time.Second)
		if d := a.Decide(Load{Ready: 4}, clk.Now()); d.Replicas != 4 {
			t.Fatalf("after %ds of lull: scaled down early to %d", i, d.Replicas)
		}
	}
	clk.Advance(2 * time.Second)
	if d := a.Decide(Load{Ready: 4}, clk.Now()); d.Replicas != 1 {
		t.Fatalf("after the down window: want min 1, got %+v", d)
	}
}

func TestDecideBoundsAndRate(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	s := scalerSpec(0, 3, 0, 0)
	s.Autoscaling.Metric, s.Autoscaling.Target = model.ScaleOnRate, 10
	s.Autoscaling.ScaleDownWindow = model.Duration(time.Second)
	a := NewAutoscaler(s)
	if d := a.Decide(Load{Ready: 1, Rate: 25}, clk.Now()); d.Replicas != 3 || d.Raw != 3 {
		t.Fatalf("25 rps at 10 per replica: %+v", d)
	}
	clk.Advance(time.Second)
	if d := a.Decide(Load{Ready: 3, Rate: 1000}, clk.Now()); d.Replicas != 3 || d.Raw != 100 {
		t.Fatalf("max bounds the count: %+v", d)
	}
	clk.Advance(2 * time.Second)
	if d := a.Decide(Load{Ready: 3}, clk.Now()); d.Replicas != 0 {
		t.Fatalf("no traffic past the 1 s down window: want 0, got %+v", d)
	}
}

func TestDecideFixedTarget(t *testing.T) {
	s := scalerSpec(1, 5, 0, 0)
	s.Autoscaling.Metric, s.Replicas.Target = "", 3
	a := NewAutoscaler(s)
	if d := a.Decide(Load{InFlight: 100}, time.Unix(0, 0)); d.Replicas != 3 {
		t.Fatalf("fixed target: %+v", d)
	}
}

func latencySpec(minR, maxR int, targetSeconds float64, down time.Duration) model.ServiceSpec {
	s := scalerSpec(minR, maxR, 0, down)
	s.Autoscaling.Metric, s.Autoscaling.Target = model.ScaleOnLatency, targetSeconds
	return s
}

// TestDecideOnP95Latency walks one service through a day's shapes, one
// decision a second: each step's load and the count it must lead to.
func TestDecideOnP95Latency(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		load Load
		want int
	}
	for name, tc := range map[string]struct {
		start int
		steps []step
	}{
		"twice the target doubles the ready replicas": {2, []step{
			{Load{Ready: 2, P95: 1000 * ms, Samples: 100}, 4},
		}},
		"within 10% of the target holds": {2, []step{
			{Load{Ready: 2, P95: 540 * ms, Samples: 100}, 2},
			{Load{Ready: 2, P95: 460 * ms, Samples: 100}, 2},
		}},
		"just past the band moves": {2, []step{
			{Load{Ready: 2, P95: 560 * ms, Samples: 100}, 3},
		}},
		"bounded by max": {2, []step{
			{Load{Ready: 2, P95: 10 * time.Second, Samples: 100}, 6},
		}},
		"too few requests hold, however slow": {2, []step{
			{Load{Ready: 2, InFlight: 3, P95: 5 * time.Second, Samples: 19}, 2},
		}},
		"fast replicas scale down only after the down window": {4, []step{
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4},
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4},
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4},
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 1}, // 4 s after the resume: past the 3.5 s window
		}},
		"a spike inside the down window keeps the count": {4, []step{
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4},
			{Load{Ready: 4, P95: 500 * ms, Samples: 100}, 4}, // at target: wants 4
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4},
			{Load{Ready: 4, P95: 100 * ms, Samples: 100}, 4}, // the 4 is still in the window
		}},
		"no traffic falls to min after the window": {3, []step{
			{Load{Ready: 3}, 3}, {Load{Ready: 3}, 3}, {Load{Ready: 3}, 3}, {Load{Ready: 3}, 0},
		}},
		"scale from zero on a waiting request": {0, []step{
			{Load{InFlight: 1, Waiting: 1}, 1},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1000, 0))
			a := NewAutoscaler(latencySpec(0, 6, 0.5, 3500*time.Millisecond))
			a.Resume(tc.start, clk.Now())
			for i, s := range tc.steps {
				clk.Advance(time.Second)
				if d := a.Decide(s.load, clk.Now()); d.Replicas != s.want {
					t.Fatalf("step %d (%+v): %d replicas (%s), want %d", i, s.load, d.Replicas, d.Reason, s.want)
				}
			}
		})
	}
}

func TestLatencyWindowQuantile(t *testing.T) {
	now := time.Unix(5000, 0)
	var w latencyWindow
	// 90 requests at 20 ms, 10 at 2 s: the p95 lies in the 2 s bucket
	// (1.5–2 s), the p50 in the 10–25 ms one.
	for i := range 100 {
		d := 20 * time.Millisecond
		if i%10 == 0 {
			d = 2 * time.Second
		}
		w.add(now, d)
	}
	if p, n := w.quantile(now, 0.95); n != 100 || p <= 1500*time.Millisecond || p > 2*time.Second {
		t.Fatalf("p95 %v of %d", p, n)
	}
	if p, _ := w.quantile(now, 0.5); p <= 10*time.Millisecond || p > 25*time.Millisecond {
		t.Fatalf("p50 %v", p)
	}
	// Slower than the last bound reads as the last bound.
	var slow latencyWindow
	slow.add(now, time.Hour)
	if p, _ := slow.quantile(now, 0.95); p != time.Minute {
		t.Fatalf("an hour: %v", p)
	}
	// 29 s on the samples still count; 30 s on they are gone, and new
	// ones alone count.
	if _, n := w.quantile(now.Add(29*time.Second), 0.95); n != 100 {
		t.Fatalf("29 s on: %d samples", n)
	}
	w.add(now.Add(30*time.Second), 100*time.Millisecond)
	if p, n := w.quantile(now.Add(30*time.Second), 0.95); n != 1 || p <= 75*time.Millisecond || p > 100*time.Millisecond {
		t.Fatalf("30 s on: %v of %d", p, n)
	}
	if _, n := w.quantile(now.Add(time.Hour), 0.95); n != 0 {
		t.Fatalf("an hour on: %d samples", n)
	}
}
