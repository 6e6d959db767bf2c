package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestWaitingLine: `run --follow` prints why the job waits, once per
// change (issue #14 item 4).
func TestWaitingLine(t *testing.T) {
	quota := &scheduler.Verdict{Queue: "research", Position: 2, Reasons: []scheduler.Reason{
		{Scope: "node/a", Message: "0 matching GPUs free, job needs 1"},
		{Scope: "project/nlp", Message: "project nlp's quota is full"},
	}}
	view := func(st model.JobState, v *scheduler.Verdict) *api.JobView {
		return &api.JobView{Job: &model.Job{State: st}, Pending: v}
	}
	type out struct {
		Line    string
		Changed bool
	}
	tests := map[string]struct {
		prev string
		v    *api.JobView
		want out
	}{
		"job-wide reason first": {v: view(model.JobQueued, quota), want: out{"#2 in queue research; project/nlp: project nlp's quota is full", true}},
		"unchanged":             {prev: "#2 in queue research; project/nlp: project nlp's quota is full", v: view(model.JobQueued, quota), want: out{"#2 in queue research; project/nlp: project nlp's quota is full", false}},
		"started":               {prev: "x", v: view(model.JobRunning, nil), want: out{"", true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			line, changed := waitingLine(tc.prev, tc.v)
			if diff := cmp.Diff(tc.want, out{line, changed}); diff != "" {
				t.Errorf("waitingLine (-want +got):\n%s", diff)
			}
		})
	}
}
