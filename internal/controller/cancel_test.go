package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestCancelIsFinal: a job cancelled while its attempt runs ends cancelled
// however the attempt then ends — its node lost, its replica lost, a
// preemption or a gang's failure already stopping it — and never runs again.
func TestCancelIsFinal(t *testing.T) {
	type outcome struct {
		Job      model.JobState
		Attempts int
		Attempt  model.AttemptState
	}
	cases := map[string]struct {
		replicas int
		// before runs before the cancel; after ends the attempt.
		before func(h *harness, clk *clock.Fake, reps []agentapi.ReplicaSpec)
		after  func(h *harness, clk *clock.Fake, reps []agentapi.ReplicaSpec)
		want   outcome
	}{
		"node silent past its heartbeat timeout": {
			replicas: 1,
			after:    func(h *harness, clk *clock.Fake, _ []agentapi.ReplicaSpec) { clk.Advance(2 * time.Minute) },
			want:     outcome{model.JobCancelled, 1, model.AttemptLost},
		},
		"node retired": {
			replicas: 1,
			after: func(h *harness, _ *clock.Fake, _ []agentapi.ReplicaSpec) {
				if err := h.c.RetireNode(context.Background(), h.node, "pool removed"); err != nil {
					h.t.Fatal(err)
				}
			},
			want: outcome{model.JobCancelled, 1, model.AttemptLost},
		},
		"agent reports the replica lost": {
			replicas: 1,
			after: func(h *harness, _ *clock.Fake, reps []agentapi.ReplicaSpec) {
				h.sync(agentapi.ReplicaStatus{ID: reps[0].ID, Phase: agentapi.PhaseLost, Reason: model.ReasonLost})
			},
			want: outcome{model.JobCancelled, 1, model.AttemptLost},
		},
		"gang already stopping for a failed replica": {
			replicas: 2,
			before: func(h *harness, _ *clock.Fake, reps []agentapi.ReplicaSpec) {
				h.sync(exited(reps[1].ID, 1, ""))
			},
			after: func(h *harness, _ *clock.Fake, reps []agentapi.ReplicaSpec) {
				h.sync(exited(reps[0].ID, 143, agentapi.ReasonStopped))
			},
			want: outcome{model.JobCancelled, 1, model.AttemptCancelled},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			h := newHarness(t, newMemStore(), clk)
			h.register("", 2)
			spec := cmdSpec(1)
			spec.Replicas = tc.replicas
			spec.Retries.Failures = 3
			j := h.submit(spec)
			reps := h.waitDesired(tc.replicas).Replicas
			for _, r := range reps {
				h.sync(running(r.ID))
			}
			h.waitJob(j.ID, model.JobRunning)
			if tc.before != nil {
				tc.before(h, clk, reps)
			}
			if _, err := h.c.Cancel(context.Background(), j.ID); err != nil {
				t.Fatal(err)
			}
			tc.after(h, clk, reps)
			deadline := time.Now().Add(5 * time.Second)
			for jj, _ := h.c.Job(j.ID); !jj.State.Terminal(); jj, _ = h.c.Job(j.ID) {
				if time.Now().After(deadline) {
					t.Fatalf("job is %s (%s), want it ended", jj.State, jj.Reason)
				}
				h.await()
			}
			h.await() // a pass that would start a second attempt
			jj, _ := h.c.Job(j.ID)
			atts, _ := h.c.Attempts(j.ID)
			got := outcome{jj.State, len(atts), atts[0].State}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("after the cancel (-want +got):\n%s\nreason: %s", diff, jj.Reason)
			}
		})
	}
}
