package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func cpu(c float64) jobOpt            { return func(j *model.Job) { j.Spec.Resources.CPU = c } }
func memory(m model.Bytes) jobOpt     { return func(j *model.Job) { j.Spec.Resources.Memory = m } }
func fellBack(preemptions int) jobOpt { return func(j *model.Job) { j.Preemptions = preemptions } }

// TestVerdictsAreKeyedByWhatDecidesThem: jobs are filtered once per fit
// key, so a fact a filter reads but the key lacks lets one job's verdict
// become another's (issue #14 item 2: a {gpus: 1, cpu: 1000} job made
// plain 1-GPU jobs wait with 7 GPUs free, showing its CPU reason).
func TestVerdictsAreKeyedByWhatDecidesThem(t *testing.T) {
	small := func() *model.Node {
		n := node("a", "H100", 8, 80*model.GiB)
		n.CPU, n.Memory = 2, 16*model.GiB
		return n
	}
	spotNode := func() *model.Node {
		n := small()
		n.CapacityType = model.Spot
		return n
	}
	onDemandAfter := func(j *model.Job) {
		j.Spec.Spot = model.SpotAllowed
		j.Spec.Retries.OnDemandAfterPreemptions = 1
	}
	type want struct {
		Bound    []string
		Messages map[string][]string // job → its reasons' messages
	}
	tests := map[string]struct {
		node *model.Node
		jobs []*model.Job
		want want
	}{
		"cpu": {
			node: small(),
			jobs: []*model.Job{job("greedy", 1, 1, cpu(1000)), job("plain", 2, 1)},
			want: want{Bound: []string{"plain"}, Messages: map[string][]string{"greedy": {"node has 2.0 CPUs, job needs 1000.0 per replica"}}},
		},
		"memory": {
			node: small(),
			jobs: []*model.Job{job("greedy", 1, 1, memory(1024*model.GiB)), job("plain", 2, 1)},
			want: want{Bound: []string{"plain"}, Messages: map[string][]string{"greedy": {"node has 16Gi memory, job needs 1Ti per replica"}}},
		},
		"spot fallback is the job's own": {
			node: spotNode(),
			jobs: []*model.Job{job("fell-back", 1, 1, onDemandAfter, fellBack(1)), job("never", 2, 1, spot(model.SpotNever))},
			want: want{Messages: map[string][]string{
				"fell-back": {"node is spot and the job falls back to on-demand (preemptions or deadline)"},
				"never":     {"node is spot and the job does not allow spot"},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan := Schedule(snapshot([]*model.Node{tc.node}, tc.jobs), nil, now, 1)
			got := want{Bound: boundIDs(plan), Messages: map[string][]string{}}
			for id, v := range plan.Verdicts {
				for _, r := range v.Reasons {
					got.Messages[id] = append(got.Messages[id], r.Message)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
