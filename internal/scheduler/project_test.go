package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func inProject(p string) jobOpt { return func(j *model.Job) { j.Project = p } }

// TestProjectQuota: Project.spec.quota caps the GPUs a project's jobs hold
// across queues; a job over it waits with the project's reason and gets no
// candidate, so no capacity is bought for it (issue #14 item 8: three
// 1-GPU jobs ran under a quota of one H100).
func TestProjectQuota(t *testing.T) {
	type want struct {
		Bound      []string
		Codes      map[string][]string
		Candidates []string
	}
	offers := []model.Offer{{Provider: "aws", Region: "us-east-1", InstanceType: "p5", CapacityType: model.OnDemand, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 98}}
	tests := map[string]struct {
		quota   map[string]map[string]float64
		running []*model.Job
		jobs    []*model.Job
		want    want
	}{
		"one H100 for three jobs": {
			quota: map[string]map[string]float64{"nlp": {"H100": 1}},
			jobs:  []*model.Job{job("n1", 1, 1, inProject("nlp")), job("n2", 2, 1, inProject("nlp")), job("n3", 3, 1, inProject("nlp")), job("other", 4, 1, inProject("vision"))},
			want: want{Bound: []string{"n1", "other"}, Codes: map[string][]string{
				"n2": {ReasonProjectQuota}, "n3": {ReasonProjectQuota}}},
		},
		"running work counts; any-model line": {
			quota:   map[string]map[string]float64{"nlp": {model.AnyGPU: 2}},
			running: []*model.Job{job("r", 1, 2, inProject("nlp"))},
			jobs:    []*model.Job{job("n1", 2, 1, inProject("nlp")), job("big", 3, 8, inProject("vision"))},
			want:    want{Codes: map[string][]string{"n1": {ReasonProjectQuota}, "big": {ReasonGPUsFree, ReasonNoEstimate}}, Candidates: []string{"big"}},
		},
		"a model the quota does not list has none": {
			quota: map[string]map[string]float64{"nlp": {"A100": 1}},
			jobs:  []*model.Job{job("n1", 1, 2, inProject("nlp")), job("free", 2, 2)},
			want:  want{Bound: []string{"free"}, Codes: map[string][]string{"n1": {ReasonProjectQuota}}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
			w.st.SetProjectQuotas(tc.quota)
			for _, j := range tc.running {
				w.run(j, now.Add(-time.Minute), "a", 0, 1)
			}
			w.submit(tc.jobs...)
			plan := Schedule(w.st.Snapshot(), offers, now, 1)
			got := want{Bound: boundIDs(plan)}
			for id, v := range plan.Verdicts.All() {
				for _, r := range v.Reasons {
					if got.Codes == nil {
						got.Codes = map[string][]string{}
					}
					got.Codes[id] = append(got.Codes[id], r.Code)
				}
			}
			for _, c := range plan.Candidates {
				got.Candidates = append(got.Candidates, c.JobID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
