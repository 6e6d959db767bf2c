package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// The jobs table's one request: a page of jobs with the total, search,
// and each listed job's cost and efficiency.
func TestJobListPagingSearchAndSummaries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	var ids []string
	for i := range 5 {
		ids = append(ids, e.submit(t, jobManifest(fmt.Sprintf("train-%d", i))))
	}
	list := func(q string) api.JobList {
		t.Helper()
		r := e.do(t, req{Method: "GET", Path: "/v1/jobs?" + q, Token: e.admin})
		if r.Status != http.StatusOK {
			t.Fatalf("GET /v1/jobs?%s: %d %s", q, r.Status, r.Body)
		}
		var l api.JobList
		if err := json.Unmarshal(r.Body, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	got := func(l api.JobList) []string {
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	// Newest first: ids[4], ids[3], …
	if l := list("summary=true&limit=2&offset=0"); l.Total != 5 || fmt.Sprint(got(l)) != fmt.Sprint([]string{ids[4], ids[3]}) || len(l.Summaries) != 2 {
		t.Errorf("page 1 = %v total %d summaries %d, want [%s %s] of 5 with 2 summaries", got(l), l.Total, len(l.Summaries), ids[4], ids[3])
	}
	if l := list("summary=true&limit=2&offset=4"); l.Total != 5 || fmt.Sprint(got(l)) != fmt.Sprint([]string{ids[0]}) {
		t.Errorf("last page = %v total %d, want [%s] of 5", got(l), l.Total, ids[0])
	}
	if l := list("q=TRAIN-3&limit=10"); l.Total != 1 || len(l.Jobs) != 1 || l.Jobs[0].ID != ids[3] {
		t.Errorf("search train-3 = %v (total %d), want %s", got(l), l.Total, ids[3])
	}
	if l := list("offset=9"); l.Total != 5 || len(l.Jobs) != 0 {
		t.Errorf("past the end = %v total %d, want none of 5", got(l), l.Total)
	}
	for _, q := range []string{"offset=-1", "summary=yes"} {
		if r := e.do(t, req{Method: "GET", Path: "/v1/jobs?" + q, Token: e.admin}); r.Status != http.StatusBadRequest {
			t.Errorf("GET /v1/jobs?%s = %d, want 400", q, r.Status)
		}
	}
	// Without paging parameters the answer is as before: no total.
	if l := list("limit=3"); l.Total != 0 || l.Summaries != nil || len(l.Jobs) != 3 {
		t.Errorf("plain list = %d jobs, total %d, summaries %v", len(l.Jobs), l.Total, l.Summaries)
	}
}

// A running job's GPU telemetry comes back per attempt and GPU, over time,
// in the units the dashboard plots.
func TestJobTelemetrySeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	agent := e.registerNode(t, 2)
	id := e.submit(t, jobManifest("plotted"))
	reps := agent.waitReplicas(t, 1)
	agent.report(t, runningStatus(reps[0].ID))
	e.waitJob(t, id, model.JobRunning)
	held := reps[0].GPUs[0]
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	var samples []agentapi.TelemetrySample
	for i := range 6 {
		s := agentapi.TelemetrySample{Time: t0.Add(time.Duration(i) * 10 * time.Second)}
		for g := range 2 {
			s.GPUs = append(s.GPUs, agentapi.GPUTelemetry{Index: g, UUID: fmt.Sprintf("GPU-%s", "aa"[:g+1]), Values: map[string]float64{
				"DCGM_FI_PROF_SM_ACTIVE": 0.1 * float64(i), "DCGM_FI_DEV_FB_USED": 1000 * float64(g+1), "DCGM_FI_DEV_FB_TOTAL": 81559, "DCGM_FI_DEV_POWER_USAGE": 300}})
		}
		samples = append(samples, s)
	}
	if _, err := e.ctrl.Sync(context.Background(), agentapi.SyncRequest{NodeID: agent.node, Generation: agent.gen, Statuses: []agentapi.ReplicaStatus{runningStatus(reps[0].ID)},
		Telemetry: &agentapi.Telemetry{Source: "dcgm", Samples: samples}}); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, req{Method: "GET", Path: "/v1/jobs/" + id + "/telemetry", Token: e.admin})
	if r.Status != http.StatusOK {
		t.Fatalf("telemetry: %d %s", r.Status, r.Body)
	}
	var tel api.JobTelemetry
	if err := json.Unmarshal(r.Body, &tel); err != nil {
		t.Fatal(err)
	}
	if len(tel.Attempts) != 1 || tel.Attempts[0].Number != 1 || len(tel.Attempts[0].GPUs) != 1 {
		t.Fatalf("telemetry = %s, want attempt 1 with its one GPU", r.Body)
	}
	g := tel.Attempts[0].GPUs[0]
	if g.Index != held || g.Node != agent.node || len(g.Points) != 6 {
		t.Fatalf("GPU series = node %s GPU %d with %d points, want node %s GPU %d (the job's, not the other) with 6", g.Node, g.Index, len(g.Points), agent.node, held)
	}
	for i, p := range g.Points {
		if !p.Time.Equal(t0.Add(time.Duration(i)*10*time.Second)) || p.SMActive == nil || *p.SMActive < 0.1*float64(i)-1e-6 || *p.SMActive > 0.1*float64(i)+1e-6 ||
			p.MemUsedMiB == nil || *p.MemUsedMiB != 1000*float64(held+1) || p.PowerW == nil || *p.PowerW != 300 {
			t.Errorf("point %d = %+v", i, p)
		}
	}
	if r := e.do(t, req{Method: "GET", Path: "/v1/jobs/j-nope/telemetry", Token: e.admin}); r.Status != http.StatusNotFound {
		t.Errorf("an unknown job's telemetry = %d, want 404", r.Status)
	}
}
