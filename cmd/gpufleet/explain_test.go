package main

import (
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/api"
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

// TestExplainServiceTable: explain service says the policy in words, the
// load the autoscaler reads, where a pending replica's reason is, and each
// decision with its reason.
func TestExplainServiceTable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := &api.ServiceView{
		Service: model.Service{Name: "llm", Spec: model.ServiceSpec{
			Replicas:    model.ServiceReplicas{Min: 1, Max: 4},
			Autoscaling: model.ServiceAutoscaling{Metric: model.ScaleOnLatency, Target: 0.5, ScaleDownWindow: model.Duration(time.Minute)},
		}, Decisions: []model.Event{{Time: at, Message: "replicas 2 → 3: p95 latency 812ms over target 500ms with 2 ready"}}},
		Desired: 3, Ready: 2, InFlight: 7,
		Load: model.ServiceLoad{Rate: 12.5, P95Seconds: 0.8123, LatencySamples: 340},
		Replicas: []model.ServiceReplica{
			{Job: "j-a", Slot: 0, State: model.ReplicaReady, JobState: model.JobRunning, Address: "10.0.0.5:8000", Generation: 1},
			{Job: "j-c", Slot: 2, State: model.ReplicaPending, JobState: model.JobQueued, Generation: 1},
		},
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	explainServiceTable(tw, s)
	tw.Flush()
	for _, want := range []string{
		"p95 latency (time to first byte) at 500ms, ±10%; 1 to 4 replicas",
		"7 in flight (0 waiting for a replica), 12.5 requests/s, p95 812ms over 340 requests",
		"3 desired, 2 ready",
		"j-c pending - (job queued), generation 1; why it waits: gpufleet explain j-c",
		"2026-12-06T12:00:00Z  replicas 2 → 3: p95 latency 812ms over target 500ms with 2 ready",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
