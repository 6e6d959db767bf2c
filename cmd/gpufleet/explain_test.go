package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestCandidateLine: explain shows an expected cost to finish only when
// the job has a runtime estimate; without one it says what to set.
func TestCandidateLine(t *testing.T) {
	t.Parallel()
	o := model.Offer{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.Spot, PricePerHour: 40}
	tests := map[string]struct {
		c    scheduler.Candidate
		want string
	}{
		"with an estimate": {c: scheduler.Candidate{Instances: 1, Offers: []model.Offer{o}, ExpectedCost: 123.456},
			want: "1 × p5.48xlarge aws/us-east-1 spot $40.00/h, expected cost to finish $123.46"},
		"runtime assumed": {c: scheduler.Candidate{Instances: 1, Offers: []model.Offer{o}, ExpectedCost: 40, RuntimeAssumed: true},
			want: "1 × p5.48xlarge aws/us-east-1 spot $40.00/h; no expected cost to finish without a runtime estimate (set spec.estimate.runtime or limits.runtime)"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, candidateLine(&tt.c)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
