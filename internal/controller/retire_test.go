package controller

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestRetireNodeRequeuesAtOnce: a retired node is lost without waiting for
// the heartbeat timeout (the fake clock never moves), its attempt requeues,
// and the node comes back when it registers again.
func TestRetireNodeRequeuesAtOnce(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	id := h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)

	if err := h.c.RetireNode(context.Background(), id, "kubernetes pool k8s removed"); err != nil {
		t.Fatal(err)
	}
	h.waitJob(j.ID, model.JobQueued)
	if n := h.c.Nodes()[0]; n.State != model.NodeLost {
		t.Errorf("node state = %s, want lost", n.State)
	}
	atts, _ := h.c.Attempts(j.ID)
	if atts[0].State != model.AttemptLost {
		t.Errorf("attempt = %s, want lost", atts[0].State)
	}
	if err := h.c.RetireNode(context.Background(), id, "again"); err != nil {
		t.Errorf("retiring a lost node: %v", err)
	}
	if err := h.c.RetireNode(context.Background(), "no-such-node", "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("retiring an unknown node: %v, want ErrNotFound", err)
	}
	h.register(id, 1)
	if n := h.c.Nodes()[0]; n.State != model.NodeReady {
		t.Errorf("node state after registering again = %s, want ready", n.State)
	}
}

// TestSecretEnvNamesTheSecrets: a replica says which of its environment
// is secret, so a runner that writes objects others read keeps it apart.
func TestSecretEnvNamesTheSecrets(t *testing.T) {
	h := newHarness(t, newMemStore(), clock.NewFake(t0))
	h.register("", 1)
	h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	if diff := cmp.Diff([]string{"GPUFLEET_JOB_TOKEN"}, rs.SecretEnv); diff != "" {
		t.Errorf("secret env (-want +got):\n%s", diff)
	}
	if got := secretEnvNames(map[string]string{"HF_TOKEN": "x", "A_KEY": "y"}); !slices.Equal(got, []string{"A_KEY", "GPUFLEET_JOB_TOKEN", "HF_TOKEN"}) {
		t.Errorf("secretEnvNames = %v", got)
	}
}
