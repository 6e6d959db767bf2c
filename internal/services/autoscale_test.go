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
