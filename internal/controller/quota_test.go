package controller

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

const nlpQuota = `apiVersion: gpufleet.dev/v1
kind: Project
metadata: {name: nlp}
spec:
  quota: {H100: 1}
`

// TestProjectQuotaIsEnforced: three 1-GPU jobs of a project whose quota
// is one H100 ran at once (issue #14 item 8). The scheduler now holds the
// project to its Project.spec.quota, across restarts of the controller.
func TestProjectQuotaIsEnforced(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	h := newHarness(t, st, clock.NewFake(t0))
	set, fe := manifest.Parse([]manifest.Source{{Name: "projects.yaml", Data: []byte(nlpQuota), Format: manifest.YAML}}, manifest.Checks{})
	if fe != nil {
		t.Fatal(fe)
	}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	h.register("n1", 8)
	var ids []string
	for range 3 {
		spec := model.JobSpec{Replicas: 1, Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}}
		spec.Default()
		j, _, err := h.c.Submit(ctx, Submission{Project: "nlp", User: "test", Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	h.waitDesired(1)
	// A few more passes: nothing else may start.
	for range 3 {
		h.await()
	}
	states := func() []model.JobState {
		var out []model.JobState
		for _, id := range ids {
			j, err := h.c.Job(id)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, j.State)
		}
		return out
	}
	want := []model.JobState{model.JobAdmitted, model.JobQueued, model.JobQueued}
	if diff := cmp.Diff(want, states()); diff != "" {
		t.Errorf("job states (-want +got):\n%s", diff)
	}
	if v, ok := h.c.Verdict(ids[1]); !ok || len(v.Reasons) == 0 || v.Reasons[0].Scope != "project/nlp" {
		t.Errorf("verdict of the second job = %+v, want its project's quota first", v)
	}

	// After a restart the quota still holds.
	h.stop()
	h.c.Close()
	h2 := newHarness(t, st, clock.NewFake(t0))
	h2.node = "n1"
	for range 3 {
		h2.await()
	}
	h = h2
	if diff := cmp.Diff(want, states()); diff != "" {
		t.Errorf("job states after a restart (-want +got):\n%s", diff)
	}
}
