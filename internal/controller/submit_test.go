package controller

import (
	"context"
	"errors"
	"testing"

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
	set, fe := manifest.Parse([]manifest.Source{{Name: "classes.yaml", Data: []byte(protectedClass), Format: manifest.YAML}}, nil)
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
