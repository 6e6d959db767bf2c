package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// allStates is the state filter that lists every job whatever its state.
func allStates() string {
	var s []string
	for _, st := range model.JobStates {
		s = append(s, string(st))
	}
	return strings.Join(s, ",")
}

// listJobs lists jobs over HTTP as token.
func (e *testEnv) listJobs(t *testing.T, token, query string) []*model.Job {
	t.Helper()
	r := e.do(t, req{Method: "GET", Path: "/v1/jobs" + query, Token: token})
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/jobs%s: %d %s", query, r.Status, r.Body)
	}
	var l api.JobList
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	return l.Jobs
}

// assertNoJobs checks that nothing was stored, through the API (every state,
// and the default listing) and in the controller.
func (e *testEnv) assertNoJobs(t *testing.T) {
	t.Helper()
	for _, q := range []string{"?state=" + allStates() + "&limit=100000", ""} {
		if jobs := e.listJobs(t, e.admin, q); len(jobs) != 0 {
			t.Errorf("GET /v1/jobs%s lists %d jobs, want none", q, len(jobs))
		}
	}
	if jobs := e.ctrl.Jobs(model.JobFilter{}); len(jobs) != 0 {
		t.Errorf("controller holds %d jobs, want none", len(jobs))
	}
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	const (
		jsonType = "application/json"
		yamlType = "application/yaml"
	)
	tests := map[string]struct {
		contentType string
		body        string
		want        []string // field paths, sorted
	}{
		"every problem at once": {
			contentType: jsonType,
			body: `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "bogus": 1,
				"spec": {"resources": {"gpus": -1, "gpu": {"models": ["H100", "Z9000"]}}, "run": {"command": []}}}`,
			want: []string{"bogus", "spec.resources.gpu.models[1]", "spec.resources.gpus", "spec.run.command"},
		},
		"negative GPU count": {
			contentType: jsonType,
			body:        `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"resources": {"gpus": -2}, "run": {"command": ["true"]}}}`,
			want:        []string{"spec.resources.gpus"},
		},
		"unknown nested field": {
			contentType: jsonType,
			body:        `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"resources": {"gpus": 1, "gpuz": 2}, "run": {"command": ["true"]}}}`,
			want:        []string{"spec.resources.gpuz"},
		},
		"unknown GPU model": {
			contentType: jsonType,
			body:        `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"resources": {"gpus": 1, "gpu": {"models": ["Z9000"]}}, "run": {"command": ["true"]}}}`,
			want:        []string{"spec.resources.gpu.models[0]"},
		},
		"empty command": {
			contentType: jsonType,
			body:        `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "spec": {"resources": {"gpus": 1}, "run": {"command": []}}}`,
			want:        []string{"spec.run.command"},
		},
		"wrong types and header": {
			contentType: jsonType,
			body:        `{"apiVersion": "v0", "kind": "Pod", "spec": {"replicas": "two", "resources": {"gpus": 1}, "run": {"command": ["true"]}}}`,
			want:        []string{"apiVersion", "kind", "spec.replicas"},
		},
		"not JSON": {
			contentType: jsonType,
			body:        `{"apiVersion": "gpufleet.dev/v1", "kind": `,
			want:        []string{"body"},
		},
		"YAML sent as JSON": {
			contentType: jsonType,
			body:        "apiVersion: gpufleet.dev/v1\nkind: Job\n",
			want:        []string{"body"},
		},
		"empty body": {
			contentType: jsonType,
			body:        "",
			want:        []string{"body"},
		},
		"JSON null": {
			contentType: jsonType,
			body:        "null",
			want:        []string{"body"},
		},
		"invalid YAML": {
			contentType: yamlType,
			body:        "apiVersion: gpufleet.dev/v1\nkind: [Job\n",
			want:        []string{"body"},
		},
		"YAML with problems": {
			contentType: yamlType,
			body:        "apiVersion: gpufleet.dev/v1\nkind: Job\nspec:\n  resources: {gpus: -1}\n  run: {command: []}\n  colour: blue\n",
			want:        []string{"spec.colour", "spec.resources.gpus", "spec.run.command"},
		},
	}
	e := newEnv(t, envConfig{})
	t.Run("cases", func(t *testing.T) {
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Header: map[string]string{"Content-Type": tc.contentType}, Body: []byte(tc.body)})
				if r.Status != http.StatusBadRequest {
					t.Fatalf("status = %d, want 400; body %s", r.Status, r.Body)
				}
				p := problem(t, r)
				got := problemPaths(p)
				sort.Strings(got)
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("problem paths (-want +got):\n%s\nproblem: %s", diff, r.Body)
				}
				for _, fe := range p.Errors {
					if fe.Message == "" {
						t.Errorf("problem at %s has no message", fe.Path)
					}
				}
			})
		}
	})
	// "cases" returns once its parallel subtests have finished.
	e.assertNoJobs(t)
}

func TestSubmitYAML(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	yaml := `apiVersion: gpufleet.dev/v1
kind: Job
metadata: {name: yaml-job, project: nlp, tags: {team: nlp}}
spec:
  resources: {gpus: 1, gpu: {models: [h100]}}   # any case; stored as the catalog spells it
  run: {command: [python, train.py], env: {LR: "3e-4"}}
`
	for _, ct := range []string{"application/yaml", "application/x-yaml; charset=utf-8", "text/yaml"} {
		t.Run(ct, func(t *testing.T) {
			r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Header: map[string]string{"Content-Type": ct}, Body: []byte(yaml)})
			if r.Status != http.StatusCreated {
				t.Fatalf("status = %d, want 201; body %s", r.Status, r.Body)
			}
			var v api.JobView
			if err := json.Unmarshal(r.Body, &v); err != nil {
				t.Fatal(err)
			}
			if got, want := r.Header.Get("Location"), "/v1/jobs/"+v.ID; got != want {
				t.Errorf("Location = %q, want %q", got, want)
			}
			got := struct {
				Name, Project, User string
				State               model.JobState
				Models, Command     []string
				Tags                map[string]string
			}{v.Name, v.Project, v.User, v.State, v.Spec.Resources.GPU.Models, v.Spec.Run.Command, v.Tags}
			want := got
			want.Name, want.Project, want.User, want.State = "yaml-job", "nlp", "admin", model.JobQueued
			want.Models, want.Command, want.Tags = []string{"H100"}, []string{"python", "train.py"}, map[string]string{"team": "nlp"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("job (-want +got):\n%s", diff)
			}
			stored, err := e.ctrl.Job(v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(v.Job, stored); diff != "" {
				t.Errorf("controller's job differs from the response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSubmitBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1024
	e := newEnv(t, envConfig{MaxBodyBytes: limit})
	fits := jobManifest("fits")
	if len(fits) > limit {
		t.Fatalf("test manifest is %d bytes, over the %d-byte limit", len(fits), limit)
	}
	// pad makes valid JSON of exactly n bytes: white space after the document.
	pad := func(doc []byte, n int) []byte {
		return append(append([]byte{}, doc...), strings.Repeat(" ", n-len(doc))...)
	}
	padded := func(n int) []byte { return pad(fits, n) }
	tests := map[string]struct {
		body []byte
		path string
		want int
	}{
		"under the limit":              {body: fits, path: "/v1/jobs", want: http.StatusCreated},
		"exactly the limit":            {body: padded(limit), path: "/v1/jobs", want: http.StatusCreated},
		"one byte over":                {body: padded(limit + 1), path: "/v1/jobs", want: http.StatusRequestEntityTooLarge},
		"far over":                     {body: padded(64 * limit), path: "/v1/jobs", want: http.StatusRequestEntityTooLarge},
		"token creation far over":      {body: append([]byte(`{"kind":"user","subject":"`+strings.Repeat("x", 2*limit)), `"}`...), path: "/v1/tokens", want: http.StatusRequestEntityTooLarge},
		"token creation one byte over": {body: pad([]byte(`{"kind":"user","subject":"bob","ttl":"1h"}`), limit+1), path: "/v1/tokens", want: http.StatusRequestEntityTooLarge},
		"token creation at the limit":  {body: pad([]byte(`{"kind":"user","subject":"bob","ttl":"1h"}`), limit), path: "/v1/tokens", want: http.StatusCreated},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, req{Method: "POST", Path: tc.path, Token: e.admin, Header: map[string]string{"Content-Type": "application/json"}, Body: tc.body})
			if r.Status != tc.want {
				t.Fatalf("status = %d, want %d; body %s", r.Status, tc.want, r.Body)
			}
			if tc.want == http.StatusRequestEntityTooLarge {
				p := problem(t, r)
				if !strings.Contains(p.Detail, fmt.Sprint(limit)) {
					t.Errorf("problem detail %q does not name the limit", p.Detail)
				}
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	_, bob := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "bob"})
	e.grant(t, "bob", model.DefaultProject, model.RoleMember)
	post := func(t *testing.T, token, key string, body []byte) (int, string) {
		t.Helper()
		hdr := map[string]string{"Content-Type": "application/json"}
		if key != "" {
			hdr[api.IdempotencyHeader] = key
		}
		r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: token, Header: hdr, Body: body})
		if r.Status >= 400 {
			problem(t, r)
			return r.Status, ""
		}
		var v api.JobView
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatal(err)
		}
		return r.Status, v.ID
	}
	a, b := jobManifest("a"), jobManifest("b")

	t.Run("same key and body", func(t *testing.T) {
		s1, id1 := post(t, e.admin, "k-same", a)
		s2, id2 := post(t, e.admin, "k-same", a)
		if diff := cmp.Diff([]int{201, 200}, []int{s1, s2}); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
		if id1 == "" || id1 != id2 {
			t.Errorf("job ids %q and %q, want the same", id1, id2)
		}
	})
	t.Run("same key, different body", func(t *testing.T) {
		s1, _ := post(t, e.admin, "k-diff", a)
		s2, _ := post(t, e.admin, "k-diff", b)
		if diff := cmp.Diff([]int{201, 409}, []int{s1, s2}); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
	})
	t.Run("no key", func(t *testing.T) {
		s1, id1 := post(t, e.admin, "", a)
		s2, id2 := post(t, e.admin, "", a)
		if diff := cmp.Diff([]int{201, 201}, []int{s1, s2}); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
		if id1 == id2 {
			t.Errorf("two submissions without a key made one job %s", id1)
		}
	})
	t.Run("keys are per user", func(t *testing.T) {
		s1, id1 := post(t, e.admin, "k-user", a)
		s2, id2 := post(t, bob, "k-user", a)
		if diff := cmp.Diff([]int{201, 201}, []int{s1, s2}); diff != "" {
			t.Errorf("statuses (-want +got):\n%s", diff)
		}
		if id1 == id2 {
			t.Errorf("two users' submissions with one key made one job %s", id1)
		}
	})
	t.Run("concurrent retries", func(t *testing.T) {
		const n = 16
		statuses := make([]int, n)
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { statuses[i], ids[i] = post(t, e.admin, "k-race", a) })
		}
		wg.Wait()
		created := 0
		for i := range n {
			if statuses[i] == http.StatusCreated {
				created++
			} else if statuses[i] != http.StatusOK {
				t.Errorf("status %d, want 200 or 201", statuses[i])
			}
			if ids[i] != ids[0] {
				t.Errorf("job ids %q and %q, want one job", ids[0], ids[i])
			}
		}
		if created != 1 {
			t.Errorf("%d submissions created a job, want 1", created)
		}
	})
	t.Run("invalid key", func(t *testing.T) {
		for _, key := range []string{strings.Repeat("k", 256), "tab\there", "naïve"} {
			r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin,
				Header: map[string]string{"Content-Type": "application/json", api.IdempotencyHeader: key}, Body: a})
			if r.Status != http.StatusBadRequest {
				t.Fatalf("key %q: status = %d, want 400", key, r.Status)
			}
			if diff := cmp.Diff([]string{"header.Idempotency-Key"}, problemPaths(problem(t, r))); diff != "" {
				t.Errorf("key %q: problem paths (-want +got):\n%s", key, diff)
			}
		}
	})
	t.Run("jobs made", func(t *testing.T) {
		// same key: 1, different body: 1, no key: 2, per user: 2, race: 1.
		if got := len(e.ctrl.Jobs(model.JobFilter{})); got != 7 {
			t.Errorf("controller holds %d jobs, want 7", got)
		}
	})
}
