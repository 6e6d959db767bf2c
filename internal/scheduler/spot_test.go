package scheduler

import (
	"testing"
	"time"

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
		"allowed stays allowed":               {spot: model.SpotAllowed, want: model.SpotAllowed},
		"below onDemandAfterPreemptions":      {spot: model.SpotAllowed, preemptions: 2, after: 3, want: model.SpotAllowed},
		"at onDemandAfterPreemptions":         {spot: model.SpotAllowed, preemptions: 3, after: 3, want: model.SpotNever},
		"deadline too close for an interrupt": {spot: model.SpotAllowed, deadline: &soon, want: model.SpotNever},
		"deadline far enough":                 {spot: model.SpotAllowed, deadline: &later, want: model.SpotAllowed},
		"required is kept":                    {spot: model.SpotRequired, preemptions: 9, after: 1, want: model.SpotRequired},
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
