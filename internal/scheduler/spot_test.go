package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestEffectiveSpot(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	soon, later := now.Add(2*time.Hour), now.Add(48*time.Hour)
	tests := map[string]struct {
		spot        model.SpotPolicy
		preemptions int
		after       int
		deadline    *time.Time
		want        model.SpotPolicy
	}{
		"allowed stays allowed":          {spot: model.SpotAllowed, want: model.SpotAllowed},
		"below onDemandAfterPreemptions": {spot: model.SpotAllowed, preemptions: 2, after: 3, want: model.SpotAllowed},
		"at onDemandAfterPreemptions":    {spot: model.SpotAllowed, preemptions: 3, after: 3, want: model.SpotNever},
		// A deadline no longer turns the whole job to on-demand: each spot
		// offer and node is weighed by its own interruption rate
		// (TestDeadlineWeighsSpotRisk), since one may be safe and another not.
		"deadline close: weighed per offer": {spot: model.SpotAllowed, deadline: &soon, want: model.SpotAllowed},
		"deadline far":                      {spot: model.SpotAllowed, deadline: &later, want: model.SpotAllowed},
		"required is kept":                  {spot: model.SpotRequired, preemptions: 9, after: 1, want: model.SpotRequired},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			j := &model.Job{Preemptions: tc.preemptions}
			j.Spec.Spot = tc.spot
			j.Spec.Retries.OnDemandAfterPreemptions = tc.after
			j.Spec.Limits.Deadline = tc.deadline
			if got := EffectiveSpot(j, 2*time.Hour, now); got != tc.want {
				t.Errorf("EffectiveSpot = %q, want %q", got, tc.want)
			}
		})
	}
}

// deadlineIn gives a job that allows spot a deadline d from now, a runtime
// estimate and a checkpoint interval.
func deadlineIn(d, runtime, interval time.Duration) jobOpt {
	return func(j *model.Job) {
		dl := now.Add(d)
		j.Spec.Spot = model.SpotAllowed
		j.Spec.Limits.Deadline = &dl
		j.Spec.Estimate.Runtime = model.Duration(runtime)
		j.Spec.Checkpoint.Interval = model.Duration(interval)
	}
}

func restartIn(d time.Duration) jobOpt {
	return func(j *model.Job) { j.Spec.Checkpoint.Restart = model.Duration(d) }
}

// riskyNode is a ready 8×H100 spot node launched from an offer with rate
// interruptions per instance-hour.
func riskyNode(rate float64) *model.Node {
	n := node("a", "H100", 8, 80*model.GiB)
	n.CapacityType, n.InterruptionRate = model.Spot, rate
	return n
}

// TestDeadlineWeighsSpotRisk: under limits.deadline a spot offer is ranked
// only when the job finishes in time with probability ≥ DeadlineConfidence
// at that offer's interruption rate, its checkpoint interval and restart
// time (the job's, else the pool's); before, one rule for every offer
// ("runtime + one 5m restart fits") let a stormy offer through and kept a
// calm one out.
func TestDeadlineWeighsSpotRisk(t *testing.T) {
	t.Parallel()
	offer := func(name string, ct model.CapacityType, price, rate float64, restart time.Duration) model.Offer {
		return model.Offer{Provider: "p", Region: "r", InstanceType: name, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB,
			CapacityType: ct, PricePerHour: price, InterruptionRate: rate, RestartTime: model.Duration(restart)}
	}
	stormy := offer("stormy", model.Spot, 8, 0.5, 0)
	calm := offer("calm", model.Spot, 10, 0.005, 0)
	mid := offer("mid", model.Spot, 10, 0.05, 0)
	slowPool := offer("mid-slow-pool", model.Spot, 10, 0.05, time.Hour)
	od := offer("od", model.OnDemand, 30, 0, 0)
	h := time.Hour
	tests := map[string]struct {
		job    *model.Job
		offers []model.Offer
		want   []string // candidate offers, best first
	}{
		// 4h of work, 30m checkpoints, 4h30m left: room for one loss.
		"a stormy offer is refused, a calm one kept": {
			job: job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute)), offers: []model.Offer{stormy, calm, od},
			want: []string{"calm", "od"},
		},
		// No slack at all, but at 0.005/h the job is uninterrupted for 4h
		// with probability 98%.
		"no slack at a low rate": {
			job: job("j", 1, 8, deadlineIn(4*h, 4*h, 30*time.Minute)), offers: []model.Offer{stormy, calm, od},
			want: []string{"calm", "od"},
		},
		"the default restart leaves room at a middling rate": {
			job: job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute)), offers: []model.Offer{mid, od},
			want: []string{"mid", "od"},
		},
		"a slow restart of the job's own does not": {
			job: job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute), restartIn(h)), offers: []model.Offer{mid, od},
			want: []string{"od"},
		},
		"nor a slow restart of the pool's": {
			job: job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute)), offers: []model.Offer{slowPool, od},
			want: []string{"od"},
		},
		"the job's restart wins over the pool's": {
			job: job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute), restartIn(5*time.Minute)), offers: []model.Offer{slowPool, od},
			want: []string{"mid-slow-pool", "od"},
		},
		// Two instances are interrupted twice as often.
		"a gang doubles the rate": {
			job: job("j", 1, 8, replicas(2), deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute)), offers: []model.Offer{mid, od},
			want: []string{"od"},
		},
		"no deadline: spot by cost alone": {
			job: job("j", 1, 8, spot(model.SpotAllowed), estimate(4*h)), offers: []model.Offer{stormy, calm, od},
			want: []string{"calm", "stormy", "od"}, // by expected cost to finish
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			plan := Schedule(snapshot(nil, []*model.Job{tc.job}), tc.offers, now, 1)
			var got []string
			for _, c := range plan.Candidates {
				for _, o := range c.Offers {
					got = append(got, o.InstanceType)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}

	// When no offer is left, explain says why, with the best chance.
	plan := Schedule(snapshot(nil, []*model.Job{job("j", 1, 8, deadlineIn(4*h+30*time.Minute, 4*h, 30*time.Minute))}), []model.Offer{stormy}, now, 1)
	var msgs []string
	for _, r := range verdictOf(plan, "j").Reasons {
		msgs = append(msgs, r.Scope+": "+r.Message)
	}
	want := []string{"job: no nodes are registered", "offer: no offer in the catalog meets the job's constraints",
		"offers(1): spot at 0.5 interruptions per instance-hour: the job finishes by limits.deadline with probability 36%, below the 95% spot needs (a later deadline, a shorter checkpoint.interval or checkpoint.restart raises it)"}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
}
