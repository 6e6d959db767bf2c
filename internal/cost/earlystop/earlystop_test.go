package earlystop

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func series(vals ...float64) Series {
	s := make(Series, len(vals))
	for i, v := range vals {
		s[i] = Point{Step: int64(i+1) * 100, Value: v}
	}
	return s
}

func flat(n int, v float64) Series {
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = v
	}
	return series(vals...)
}

func TestFlatLossStoppedAfterPatience(t *testing.T) {
	t.Parallel()
	p := Policy{Kind: Patience, Metric: "loss", Patience: 5, MinDelta: 0.01, Mode: Stop}
	loss := append(series(3, 2, 1.5), flat(10, 1.5)...)
	for i := range loss {
		loss[i].Step = int64(i+1) * 100
	}
	var stoppedAt int64
	for n := 1; n <= len(loss); n++ {
		if v := Decide(p, loss[:n], nil); v.Stop {
			stoppedAt = v.Step
			break
		}
	}
	// Best is 1.5 at step 300; five flat reports later is step 800.
	if diff := cmp.Diff(int64(800), stoppedAt); diff != "" {
		t.Errorf("stopped at (-want +got)\n%s", diff)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	peers := []Series{series(1.0, 0.8, 0.6), series(1.1, 0.9, 0.7), series(0.9, 0.7, 0.5), series(1.2, 1.0, 0.9)}
	// Best values by step 300: 0.6, 0.7, 0.5, 0.9 → median (0.6+0.7)/2 = 0.65.
	// (Their running averages, 0.8, 0.9, 0.7, 1.0333, have the median 0.85.)
	tests := map[string]struct {
		p     Policy
		s     Series
		peers []Series
		want  Verdict
	}{
		"median stops a run worse than the peers": {
			p: Policy{Kind: Median, Metric: "loss"}, s: series(1.5, 1.2, 0.9), peers: peers,
			want: Verdict{Triggered: true, Stop: true, Step: 300},
		},
		"median keeps a run better than the median": {
			p: Policy{Kind: Median, Metric: "loss"}, s: series(1.5, 1.2, 0.6), peers: peers,
			want: Verdict{Step: 300},
		},
		"median compares with the peers' best values, not their running averages": {
			p: Policy{Kind: Median, Metric: "loss"}, s: series(1.5, 1.2, 0.8), peers: peers,
			want: Verdict{Triggered: true, Stop: true, Step: 300},
		},
		"median takes each peer's best by the step, not later": {
			p: Policy{Kind: Median, Metric: "loss"}, s: series(1.5, 0.75), peers: peers, // by step 200: 0.8, 0.9, 0.7, 1.0 → 0.85
			want: Verdict{Step: 200},
		},
		"median maximising": {
			p: Policy{Kind: Median, Metric: "acc", Maximize: true}, s: series(0.1, 0.2, 0.3),
			peers: []Series{series(0.2, 0.5, 0.4), series(0.3, 0.4, 0.6), series(0.1, 0.2, 0.3)}, // bests 0.5, 0.6, 0.3 → 0.5
			want:  Verdict{Triggered: true, Stop: true, Step: 300},
		},
		"median needs enough peers": {
			p: Policy{Kind: Median, Metric: "loss", MinPeers: 5}, s: series(9, 9, 9), peers: peers,
			want: Verdict{Step: 300},
		},
		"threshold alert only": {
			p: Policy{Kind: Threshold, Metric: "acc", Maximize: true, Value: 0.5, MinSteps: 200, Mode: Alert}, s: series(0.1, 0.3),
			want: Verdict{Triggered: true, Step: 200},
		},
		"threshold in grace period": {
			p: Policy{Kind: Threshold, Metric: "acc", Maximize: true, Value: 0.5, MinSteps: 300}, s: series(0.1, 0.3),
			want: Verdict{Step: 200},
		},
		"nan": {
			p: Policy{Kind: NaN, Metric: "loss"}, s: series(1, math.NaN()),
			want: Verdict{Triggered: true, Stop: true, Step: 200},
		},
		"improving loss keeps running": {
			p: Policy{Kind: Patience, Metric: "loss", Patience: 2}, s: series(5, 4, 3, 2, 1),
			want: Verdict{Step: 500},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tt.p, tt.s, tt.peers)
			got.Reason = ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestResumeRepeatsSteps(t *testing.T) {
	t.Parallel()
	// Reported 100..400, preempted, resumed from the step-200 checkpoint
	// and reported 300 and 400 again with new values.
	reports := []Report{
		{100, map[string]float64{"loss": 4}}, {200, map[string]float64{"loss": 3}},
		{300, map[string]float64{"loss": 2.9}}, {400, map[string]float64{"loss": 2.8}},
		{300, map[string]float64{"loss": 2.5}}, {400, map[string]float64{"loss": 2.0}},
	}
	want := Series{{100, 4}, {200, 3}, {300, 2.5}, {400, 2.0}}
	got := FromReports(reports, "loss")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if v := Decide(Policy{Kind: Patience, Metric: "loss", Patience: 1}, got, nil); v.Triggered {
		t.Errorf("resumed run stopped: %+v", v)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	err := Policy{Kind: "vibes", MinDelta: -1, Mode: "panic"}.Validate()
	want := "spec.earlyStop.metric: must be set; spec.earlyStop.minDelta: must be >= 0; spec.earlyStop.mode: must be \"alert\" or \"stop\"; spec.earlyStop.policy: must be median, patience, threshold or nan"
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}
