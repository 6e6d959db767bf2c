package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

const protectedClass = `apiVersion: gpufleet.dev/v1
kind: PriorityClass
metadata: {name: protected}
spec: {value: 50, preemptible: false}
`

// TestSubmitChecksQueueAndPriorityClass: a job may name a priority class
// the fleet declares (issue #14 item 5); one naming a queue or class that
// does not exist is refused at submission with the field at fault, rather
// than waiting forever (item 4).
func TestSubmitChecksQueueAndPriorityClass(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	set, fe := manifest.Parse([]manifest.Source{{Name: "classes.yaml", Data: []byte(protectedClass), Format: manifest.YAML}}, manifest.Checks{})
	if fe != nil {
		t.Fatal(fe)
	}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		queue, priority string
		wantPaths       []string // nil: accepted
	}{
		"declared class":  {priority: "protected"},
		"built-in class":  {priority: "critical"},
		"default queue":   {queue: model.DefaultQueue},
		"unknown class":   {priority: "nope", wantPaths: []string{"spec.priority"}},
		"unknown queue":   {queue: "nosuch", wantPaths: []string{"spec.queue"}},
		"unknown of both": {queue: "nosuch", priority: "nope", wantPaths: []string{"spec.queue", "spec.priority"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := model.JobSpec{Replicas: 1, Queue: tc.queue, Priority: tc.priority, Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}}
			spec.Default()
			_, _, err := h.c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec})
			var got []string
			var refused model.FieldErrors
			if errors.As(err, &refused) {
				for _, e := range refused {
					got = append(got, e.Path)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantPaths, got); diff != "" {
				t.Errorf("refused fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJobsListSaysWhyQueuedJobsWait: a queued job in a list carries the
// short reason of its last verdict (issue #14 item 4: `jobs list` showed
// "-" for every queued job).
func TestJobsListSaysWhyQueuedJobsWait(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	j := h.submit(model.JobSpec{Replicas: 1, Resources: model.Resources{GPUs: 1}, Run: model.RunSpec{Command: []string{"true"}}})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := h.c.Verdict(j.ID); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no verdict for the queued job")
		}
		h.await()
	}
	var got []string
	for _, x := range h.c.Jobs(JobFilter{}) {
		got = append(got, x.ID+" "+string(x.State)+": "+x.Reason)
	}
	want := []string{j.ID + " queued: no nodes are registered"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
}
