package kubernetes

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

func TestCheckpointSignal(t *testing.T) {
	for name, tc := range map[string]struct {
		signal    string
		grace     time.Duration
		wantHook  []string // nil: none
		wantGrace int64    // 0: unset
	}{
		"SIGTERM is what the kubelet sends": {"SIGTERM", 45 * time.Second, nil, 45},
		"SIGUSR1 by a preStop hook":         {"SIGUSR1", 90 * time.Second, []string{"/bin/sh", "-c", "kill -s USR1 1; sleep 90"}, 90},
		"SIGINT without grace":              {"SIGINT", 0, []string{"/bin/sh", "-c", "kill -s INT 1"}, 0},
		"an unknown signal is not run":      {"SIGKILL; rm -rf /", time.Second, nil, 1},
	} {
		t.Run(name, func(t *testing.T) {
			s := spec("j-sig", 0, 1, 0)
			s.Signal, s.Grace = tc.signal, model.Duration(tc.grace)
			plan := jobPlan{pool: "k8s", settings: withDefaults(model.KubernetesPoolSettings{}), node: testTarget(), specs: []agentapi.ReplicaSpec{s}}
			job, _ := plan.build()
			pod := job.Spec.Template.Spec
			var hook []string
			if l := pod.Containers[0].Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Exec != nil {
				hook = l.PreStop.Exec.Command
			}
			if diff := cmp.Diff(tc.wantHook, hook); diff != "" {
				t.Errorf("preStop (-want +got):\n%s", diff)
			}
			var grace int64
			if pod.TerminationGracePeriodSeconds != nil {
				grace = *pod.TerminationGracePeriodSeconds
			}
			if grace != tc.wantGrace {
				t.Errorf("terminationGracePeriodSeconds = %d, want %d", grace, tc.wantGrace)
			}
		})
	}
}
