package scheduler

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// TestPlanWake: a plan says when the clock alone may change what a pass
// over the same snapshot decides — the earliest back-off end, nomination
// expiry or deadline recheck — and has no wake-up when nothing in it
// depends on the clock.
func TestPlanWake(t *testing.T) {
	deadline := func(at time.Time) jobOpt {
		return func(j *model.Job) {
			j.Spec.Limits.Deadline, j.Spec.Estimate.Runtime, j.Spec.Spot = &at, model.Duration(time.Hour), model.SpotAllowed
		}
	}
	tests := map[string]struct {
		jobs        []*model.Job
		nominations []state.Nomination
		want        time.Time
	}{
		"nothing waits on the clock": {jobs: []*model.Job{job("big", 1, 16)}},
		"the earliest back-off end": {
			jobs: []*model.Job{job("a", 1, 16, retryAt(now.Add(time.Minute), 1)), job("b", 2, 16, retryAt(now.Add(20*time.Second), 1)), job("c", 3, 16)},
			want: now.Add(20 * time.Second),
		},
		"a back-off already over": {jobs: []*model.Job{job("a", 1, 16, retryAt(now, 1))}},
		"a deadline job that may run on spot": {
			jobs: []*model.Job{job("dl", 1, 16, deadline(now.Add(5*time.Hour))), job("b", 2, 16, retryAt(now.Add(time.Hour), 1))},
			want: now.Add(DeadlineRecheck),
		},
		"a nomination's expiry": {
			jobs:        []*model.Job{job("p", 1, 16)},
			nominations: []state.Nomination{{JobID: "p", Expires: now.Add(90 * time.Second), GPUs: []state.NodeGPUs{{NodeID: "a", GPUs: []int{0}}}}},
			want:        now.Add(90 * time.Second),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := snapshot([]*model.Node{node("a", "H100", 8, 80*model.GiB)}, tc.jobs)
			snap.Nominations = tc.nominations
			plan := Schedule(snap, nil, now, 1)
			if !plan.Wake.Equal(tc.want) {
				t.Errorf("Wake = %v, want %v", plan.Wake, tc.want)
			}
		})
	}
}
