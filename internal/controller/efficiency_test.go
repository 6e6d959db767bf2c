package controller

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/efficiency"
	"github.com/gpufleet/gpufleet/internal/model"
)

// alertRules lists the controller's recent alerts as "rule job-or-node".
func alertRules(c *Controller) []string {
	var out []string
	for _, a := range c.Alerts() {
		out = append(out, a.Rule+" "+a.Job+a.Node)
	}
	return out
}

// telemetryOf is one sample of n GPUs, the GPUs in busy at 90% SM active
// and the others at sm.
func telemetryOf(at time.Time, n int, sm float64, values map[int]map[string]float64) *agentapi.Telemetry {
	s := agentapi.TelemetrySample{Time: at}
	for i := range n {
		v := map[string]float64{fieldSMActive: sm, "DCGM_FI_DEV_GPU_UTIL": 100 * sm}
		for k, x := range values[i] {
			v[k] = x
		}
		s.GPUs = append(s.GPUs, agentapi.GPUTelemetry{Index: i, UUID: "GPU-" + string(rune('a'+i)), Values: v})
	}
	return &agentapi.Telemetry{Source: "nvml", Samples: []agentapi.TelemetrySample{s}}
}

// A job on a mocked H100 node that keeps SM activity at 3% is classified
// idle, and its idle alert fires once however long it stays idle: it goes
// through the webhook outbox budget firings take, and a real receiver gets
// it once, signed with the server's webhook secret.
func TestIdleJobAlertsOnce(t *testing.T) {
	clk := clock.NewFake(t0)
	secret := []byte("alert-signing-key-0123")
	rc := &receiver{t: t, secret: secret, failFirst: 1, seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	h := newHarness(t, newMemStore(), clk, func(c *Config) {
		c.Alerts.WebhookURL = srv.URL
		c.Cost.WebhookSecret = secret
		c.Cost.MeterInterval = -1 // the test drives deliveries
	})
	h.register("", 8)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)

	for range int(45 * time.Minute / (5 * time.Second)) {
		clk.Advance(5 * time.Second)
		now := clk.Now()
		if _, err := h.c.Sync(t.Context(), agentapi.SyncRequest{NodeID: h.node, Statuses: []agentapi.ReplicaStatus{running(rs.ID)}, Telemetry: telemetryOf(now, 8, 0.03, nil)}); err != nil {
			t.Fatal(err)
		}
		h.c.evaluate(now)
		h.c.deliverDue(t.Context()) // the first post fails: retried with backoff
	}
	eff, ok := h.c.Efficiency(j.ID)
	if !ok {
		t.Fatal("no efficiency for the running job")
	}
	if eff.Verdict.Class != efficiency.Idle {
		t.Errorf("class = %s, want idle (%v)", eff.Verdict.Class, eff.Verdict.Findings)
	}
	if eff.SMActive == nil || *eff.SMActive > 0.031 || *eff.SMActive < 0.029 {
		t.Errorf("SM active = %v, want 0.03", eff.SMActive)
	}
	if diff := cmp.Diff([]string{AlertJobIdle + " " + j.ID}, alertRules(h.c)); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	got := h.c.Alerts()
	if len(got) != 1 || got[0].Since.IsZero() {
		t.Fatalf("recent alerts = %+v, want one with its idle-since", got)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if diff := cmp.Diff(map[string]int{got[0].ID: 1}, rc.seen); diff != "" {
		t.Errorf("deliveries by id (-want +got):\n%s", diff)
	}
	if rc.requests != 2 {
		t.Errorf("receiver got %d requests, want 2 (one injected failure, one delivery)", rc.requests)
	}
	var body struct {
		ID, Kind, Rule, Job string
	}
	if err := json.Unmarshal(rc.bodies[got[0].ID], &body); err != nil {
		t.Fatal(err)
	}
	if want := (struct{ ID, Kind, Rule, Job string }{got[0].ID, NotifyAlert, AlertJobIdle, j.ID}); body != want {
		t.Errorf("body = %+v, want %+v", body, want)
	}
}

// A busy job is not idle and raises nothing.
func TestBusyJobRaisesNothing(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 2)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	for range 60 {
		clk.Advance(5 * time.Second)
		now := clk.Now()
		tel := telemetryOf(now, 2, 0.9, map[int]map[string]float64{0: {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.5}, 1: {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.5}})
		if _, err := h.c.Sync(t.Context(), agentapi.SyncRequest{NodeID: h.node, Statuses: []agentapi.ReplicaStatus{running(rs.ID)}, Telemetry: tel}); err != nil {
			t.Fatal(err)
		}
		h.c.evaluate(now)
	}
	eff, _ := h.c.Efficiency(j.ID)
	if eff.Verdict.Class != efficiency.Healthy {
		t.Errorf("class = %s, want healthy (%v)", eff.Verdict.Class, eff.Verdict.Findings)
	}
	if got := alertRules(h.c); len(got) != 0 {
		t.Errorf("alerts = %v, want none", got)
	}
}

// An XID from NVIDIA's drain list drains the node once; another XID does
// not.
func TestDrainXIDDrainsNode(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 2)
	for i, xid := range []float64{13, 79, 79} {
		clk.Advance(5 * time.Second)
		tel := telemetryOf(clk.Now(), 2, 0, map[int]map[string]float64{1: {fieldXID: xid}})
		if _, err := h.c.Sync(t.Context(), agentapi.SyncRequest{NodeID: h.node, Telemetry: tel}); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if diff := cmp.Diff([]string{AlertNodeXID + " " + h.node}, alertRules(h.c)); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	for _, n := range h.c.Nodes() {
		if n.State != model.NodeDraining {
			t.Errorf("node %s is %s, want draining", n.ID, n.State)
		}
	}
}

// A queue whose waiting jobs wait past the threshold alerts once, with
// the wait it decided on.
func TestQueueWaitAlert(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk, func(c *Config) {
		c.Alerts.QueueWaitP95 = 10 * time.Minute
	})
	h.submit(cmdSpec(1)) // no node: it waits
	for range 3 {
		clk.Advance(6 * time.Minute)
		h.c.evaluate(clk.Now())
	}
	if diff := cmp.Diff([]string{AlertQueueWait + " "}, alertRules(h.c)); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	for _, a := range h.c.Alerts() {
		if want := "waited up to 12m0s, above 10m0s"; a.Rule == AlertQueueWait && !strings.Contains(a.Summary, want) {
			t.Errorf("alert %q, want it to say %q", a.Summary, want)
		}
	}
}

// An interactive job idle past IdleStopAfter is cancelled, once.
func TestIdleInteractiveJobIsStopped(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk, func(c *Config) {
		c.Alerts.IdleNotifyAfter = -1
		c.Alerts.IdleStopAfter = 15 * time.Minute
	})
	h.register("", 1)
	spec := cmdSpec(1)
	spec.Default()
	j, _, err := h.c.Submit(t.Context(), Submission{Project: "default", User: "test", Spec: spec, Tags: map[string]string{"interactive": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	for range int(20 * time.Minute / (5 * time.Second)) {
		clk.Advance(5 * time.Second)
		if _, err := h.c.Sync(t.Context(), agentapi.SyncRequest{NodeID: h.node, Statuses: []agentapi.ReplicaStatus{running(rs.ID)}, Telemetry: telemetryOf(clk.Now(), 1, 0.01, nil)}); err != nil {
			t.Fatal(err)
		}
		h.c.evaluate(clk.Now())
	}
	if diff := cmp.Diff([]string{AlertJobIdleStopped + " " + j.ID}, alertRules(h.c)); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	if resp := h.sync(); len(resp.Replicas) != 1 || !resp.Replicas[0].Stop {
		t.Errorf("desired = %+v, want the replica stopped", resp.Replicas)
	}
}

// The GPU and per-job series carry node/gpu and job labels only, and the
// job's series go when its attempt ends.
func TestTelemetrySeries(t *testing.T) {
	clk := clock.NewFake(t0)
	h := newHarness(t, newMemStore(), clk)
	h.register("", 2)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	clk.Advance(5 * time.Second)
	if _, err := h.c.Sync(t.Context(), agentapi.SyncRequest{NodeID: h.node, Statuses: []agentapi.ReplicaStatus{running(rs.ID)}, Telemetry: telemetryOf(clk.Now(), 2, 0.5, nil)}); err != nil {
		t.Fatal(err)
	}
	h.c.evaluate(clk.Now())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.c.TelemetryCollector())
	series := func() map[string][]string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				out[mf.GetName()] = append(out[mf.GetName()], strings.Join(ls, ","))
			}
		}
		return out
	}
	got := series()
	if diff := cmp.Diff([]string{"gpu=0,node=" + h.node, "gpu=1,node=" + h.node}, got["gpufleet_gpu_sm_active"]); diff != "" {
		t.Errorf("gpu series (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"job=" + j.ID}, got["gpufleet_job_sm_active"]); diff != "" {
		t.Errorf("job series (-want +got):\n%s", diff)
	}
	h.sync(exited(rs.ID, 0, ""))
	h.waitJob(j.ID, model.JobSucceeded)
	if got := series()["gpufleet_job_sm_active"]; len(got) != 0 {
		t.Errorf("job series after the job ended: %v", got)
	}
}
