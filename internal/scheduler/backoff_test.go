package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func retryAt(at time.Time, failures int) jobOpt {
	return func(j *model.Job) {
		j.RetryAt, j.Failures, j.Spec.Retries.Failures = &at, failures, 5
	}
}

// TestBackoff checks the crash-loop back-off as a scheduler input: a job
// whose RetryAt is after the pass's now is not placed, says why and when,
// and holds up neither the jobs behind it nor their GPUs; at RetryAt it is
// placed as any other job.
func TestBackoff(t *testing.T) {
	type result struct {
		Bound   []string
		Codes   map[string]string // job → its first reason's code
		RetryAt map[string]time.Time
		Message string // the backing-off job's reason
		// Capacity lists the jobs that got new capacity (candidates) or
		// reservations.
		Capacity []string
	}
	tests := map[string]struct {
		jobs []*model.Job
		want result
	}{
		"backing off: not placed, the next job takes the GPUs": {
			jobs: []*model.Job{job("crash", 1, 8, retryAt(now.Add(40*time.Second), 3)), job("next", 2, 8)},
			want: result{
				Bound:   []string{"next"},
				Codes:   map[string]string{"crash": ReasonBackoff},
				RetryAt: map[string]time.Time{"crash": now.Add(40 * time.Second)},
				Message: "backing off after 3 failures (retries.failures 5); next try at 2026-11-30T12:00:40Z (in 40s)",
			},
		},
		"backing off without room: no new capacity for it": {
			jobs: []*model.Job{job("crash", 1, 16, retryAt(now.Add(time.Minute), 1))},
			want: result{
				Codes:   map[string]string{"crash": ReasonBackoff},
				RetryAt: map[string]time.Time{"crash": now.Add(time.Minute)},
				Message: "backing off after 1 failures (retries.failures 5); next try at 2026-11-30T12:01:00Z (in 1m0s)",
			},
		},
		"back-off over without room: new capacity": {
			jobs: []*model.Job{job("crash", 1, 16, retryAt(now, 1))},
			want: result{Codes: map[string]string{"crash": FilterGPUCount}, RetryAt: map[string]time.Time{}, Capacity: []string{"crash"}},
		},
		"back-off over at now: placed first": {
			jobs: []*model.Job{job("crash", 1, 8, retryAt(now, 3)), job("next", 2, 8)},
			want: result{Bound: []string{"crash"}, Codes: map[string]string{"next": ReasonGPUsFree}, RetryAt: map[string]time.Time{}, Capacity: []string{"next"}},
		},
		"back-off in the past: placed": {
			jobs: []*model.Job{job("crash", 1, 8, retryAt(now.Add(-time.Minute), 1))},
			want: result{Bound: []string{"crash"}, Codes: map[string]string{}, RetryAt: map[string]time.Time{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := snapshot([]*model.Node{node("a", "H100", 8, 80*model.GiB)}, tc.jobs)
			offers := []model.Offer{{Provider: "sim", Region: "r", InstanceType: "16xH100", GPU: "H100", GPUCount: 16, GPUMemory: 80 * model.GiB, PricePerHour: 20, CapacityType: model.OnDemand}}
			plan := Schedule(snap, offers, now, 1)
			got := result{Codes: map[string]string{}, RetryAt: map[string]time.Time{}}
			for _, b := range plan.Bindings {
				got.Bound = append(got.Bound, b.JobID)
			}
			for id, v := range plan.Verdicts.All() {
				if len(v.Reasons) > 0 {
					got.Codes[id] = v.Reasons[0].Code
				}
				if v.RetryAt != nil {
					got.RetryAt[id] = *v.RetryAt
					got.Message = v.Reasons[0].Message
				}
			}
			for _, c := range plan.Candidates {
				got.Capacity = append(got.Capacity, c.JobID)
			}
			for _, r := range plan.Reservations {
				got.Capacity = append(got.Capacity, r.JobID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
