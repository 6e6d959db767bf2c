package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestCheckpointReport: a job's own token reports checkpoints for its job
// only, and the report is recorded on the job.
func TestCheckpointReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	agent := e.registerNode(t, 1)
	own := e.submit(t, jobManifest("own"))
	jobToken := agent.waitReplicas(t, 1)[0].Env["GPUFLEET_JOB_TOKEN"]
	other := e.submit(t, jobManifest("other"))

	tests := map[string]struct {
		token, job, body string
		want             int
	}{
		"own job":                     {jobToken, own, `{"step": 1200}`, http.StatusOK},
		"own job, no body":            {jobToken, own, "", http.StatusOK},
		"another job":                 {jobToken, other, "", http.StatusForbidden},
		"unknown field":               {jobToken, own, `{"stpe": 1}`, http.StatusBadRequest},
		"a user for any job":          {e.admin, other, "", http.StatusOK},
		"a user for a job that isn't": {e.admin, "j-nosuchjob", "", http.StatusNotFound},
	}
	for name, tc := range tests {
		r := e.do(t, req{Method: "POST", Path: "/v1/jobs/" + tc.job + "/checkpoints", Token: tc.token, Body: []byte(tc.body)})
		if r.Status != tc.want {
			t.Errorf("%s: status %d, want %d: %s", name, r.Status, tc.want, r.Body)
		}
	}
	var v api.JobView
	r := e.do(t, req{Method: "GET", Path: "/v1/jobs/" + own, Token: e.admin})
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	if v.LastCheckpoint == nil {
		t.Fatalf("job %s has no lastCheckpoint after reports: %s", own, r.Body)
	}
}

// TestArraySubmission: spec.array makes N tasks under one id, which GET,
// list and cancel understand.
func TestArraySubmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	body := []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "sweep"},
		"spec": {"array": 3, "resources": {"gpus": 1}, "run": {"command": ["true"]}}}`)
	r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Body: body})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var v api.JobView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Array == nil || r.Header.Get("Location") != "/v1/jobs/"+v.ID {
		t.Fatalf("submit answered %s at %q, want the array", r.Body, r.Header.Get("Location"))
	}
	var got []string
	for _, task := range v.Array.Tasks {
		got = append(got, fmt.Sprintf("%s %d", task.ID, task.ArrayIndex))
	}
	if diff := cmp.Diff([]string{v.ID + "-0 0", v.ID + "-1 1", v.ID + "-2 2"}, got); diff != "" {
		t.Fatalf("tasks (-want +got):\n%s", diff)
	}
	var list api.JobList
	r = e.do(t, req{Method: "GET", Path: "/v1/jobs?array=" + v.ID, Token: e.admin})
	if err := json.Unmarshal(r.Body, &list); err != nil || len(list.Jobs) != 3 {
		t.Fatalf("list by array: %v %s", err, r.Body)
	}
	r = e.do(t, req{Method: "POST", Path: "/v1/jobs/" + v.ID + "/cancel", Token: e.admin})
	if err := json.Unmarshal(r.Body, &v); err != nil || r.Status != http.StatusAccepted || v.State != model.JobCancelled {
		t.Fatalf("cancel array: %d %v %s", r.Status, err, r.Body)
	}

	bad := []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"array": 10001, "run": {"command": ["true"]}}}`)
	r = e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Body: bad})
	if diff := cmp.Diff([]string{"spec.array"}, problemPaths(problem(t, r))); diff != "" {
		t.Fatalf("array 10001: problem paths (-want +got):\n%s", diff)
	}
}
