package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func image(name, cudaVersion string) jobOpt {
	return func(j *model.Job) { j.Spec.Run.Image, j.Spec.Run.CUDA = name, cudaVersion }
}
func trusted(j *model.Job) { j.Trusted = true }

// TestIsolationFilters: an image job goes only to nodes with a container
// runtime, and only where the driver runs its CUDA; a tenant's job never
// goes to a node that does not isolate workloads, an admin's may. Each
// job's verdict is its own (the filters' inputs are in the fit key).
func TestIsolationFilters(t *testing.T) {
	processOnly := func() *model.Node {
		n := node("a", "H100", 8, 80*model.GiB)
		n.Runtimes = []string{model.RuntimeProcess}
		return n
	}
	withPodman := func(driver string) *model.Node {
		n := processOnly()
		n.Runtimes, n.Driver = []string{model.RuntimeProcess, model.RuntimeContainer}, driver
		return n
	}
	exposed := func() *model.Node {
		n := withPodman("")
		n.NotIsolated = true
		return n
	}
	tests := map[string]struct {
		node      *model.Node
		jobs      []*model.Job
		wantBound []string
		wantCodes map[string]string
	}{
		"image needs a container runtime": {
			node:      processOnly(),
			jobs:      []*model.Job{job("img", 1, 1, image("app:1", "")), job("plain", 2, 1)},
			wantBound: []string{"plain"},
			wantCodes: map[string]string{"img": FilterRuntime},
		},
		"image on a node with podman": {
			node:      withPodman(""),
			jobs:      []*model.Job{job("img", 1, 1, image("app:1", "12.4"))},
			wantBound: []string{"img"},
			wantCodes: map[string]string{},
		},
		"driver too old for the image's CUDA": {
			node:      withPodman("535.104.05"),
			jobs:      []*model.Job{job("new", 1, 1, image("app:2", "13.0")), job("old", 2, 1, image("app:1", "12.2"))},
			wantBound: []string{"old"},
			wantCodes: map[string]string{"new": FilterCUDA},
		},
		"tenants only on isolated nodes": {
			node:      exposed(),
			jobs:      []*model.Job{job("tenant", 1, 1), job("admin", 2, 1, trusted)},
			wantBound: []string{"admin"},
			wantCodes: map[string]string{"tenant": FilterIsolation},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan := Schedule(snapshot([]*model.Node{tc.node}, tc.jobs), nil, now, 1)
			codes := map[string]string{}
			for id, v := range plan.Verdicts.All() {
				if len(v.Reasons) > 0 {
					codes[id] = v.Reasons[0].Code
				}
			}
			if diff := cmp.Diff(tc.wantBound, boundIDs(plan)); diff != "" {
				t.Errorf("bound (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCodes, codes); diff != "" {
				t.Errorf("reason codes (-want +got):\n%s", diff)
			}
		})
	}
}
