package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestSecretsNeverReturned: a secret is written once and afterwards only
// its name and version are visible; jobs must name secrets their project
// holds.
func TestSecretsNeverReturned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	const value = "s3cr3t-value-for-api-test"
	r := e.do(t, req{Method: "PUT", Path: "/v1/projects/a/secrets/HF_TOKEN", Token: e.admin, Body: []byte(`{"value": "` + value + `"}`)})
	if r.Status != http.StatusOK || bytes.Contains(r.Body, []byte(value)) {
		t.Fatalf("put: %d %s", r.Status, r.Body)
	}
	r = e.do(t, req{Method: "GET", Path: "/v1/projects/a/secrets", Token: e.admin})
	var sl api.SecretList
	if err := json.Unmarshal(r.Body, &sl); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff([]string{"HF_TOKEN"}, names(sl.Secrets)); diff != "" || bytes.Contains(r.Body, []byte(value)) {
		t.Errorf("list (-want +got):\n%s\n%s", diff, r.Body)
	}
	job := func(project, secret string) []byte {
		return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "s", "project": "` + project + `"},
			"spec": {"resources": {"gpus": 0}, "run": {"command": ["true"], "secrets": ["` + secret + `"]}}}`)
	}
	tests := map[string]struct {
		body  []byte
		paths []string
	}{
		"held":           {body: job("a", "HF_TOKEN")},
		"missing":        {body: job("a", "NOPE"), paths: []string{"spec.run.secrets[0]"}},
		"other project":  {body: job("b", "HF_TOKEN"), paths: []string{"spec.run.secrets[0]"}},
		"reserved name":  {body: job("a", "GPUFLEET_JOB_TOKEN"), paths: []string{"spec.run.secrets[0]"}},
		"not a var name": {body: job("a", "A-B"), paths: []string{"spec.run.secrets[0]"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Body: tc.body})
			if bytes.Contains(r.Body, []byte(value)) {
				t.Errorf("response holds the value: %s", r.Body)
			}
			if tc.paths == nil {
				if r.Status != http.StatusCreated {
					t.Fatalf("status %d: %s", r.Status, r.Body)
				}
				return
			}
			if diff := gocmp.Diff(tc.paths, problemPaths(problem(t, r))); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/secrets/reseal", Token: e.admin}); r.Status != http.StatusOK {
		t.Errorf("reseal: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "DELETE", Path: "/v1/projects/a/secrets/HF_TOKEN", Token: e.admin}); r.Status != http.StatusNoContent {
		t.Errorf("delete: %d %s", r.Status, r.Body)
	}
}

func names(list []model.SecretInfo) []string {
	out := []string{}
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

// TestEventsShowOnlyOwnProjects: a job's events are visible only to those
// who may read the job.
func TestEventsShowOnlyOwnProjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ja := e.submit(t, projectJob("ja", "a"))
	jb := e.submit(t, projectJob("jb", "b"))
	for _, j := range []string{ja, jb} {
		if err := e.ctrl.RecordEvent(context.Background(), model.Event{Kind: "notice", Object: "job/" + j, Job: j, Message: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	e.grant(t, "ann", "a", model.RoleViewer)
	_, ann := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "ann"})
	jobsSeen := func(token string) map[string]bool {
		r := e.do(t, req{Method: "GET", Path: "/v1/events", Token: token})
		var el api.EventList
		if err := json.Unmarshal(r.Body, &el); err != nil {
			t.Fatalf("%d %s: %v", r.Status, r.Body, err)
		}
		out := map[string]bool{}
		for _, ev := range el.Events {
			if ev.Job != "" {
				out[ev.Job] = true
			}
		}
		return out
	}
	if diff := gocmp.Diff(map[string]bool{ja: true}, jobsSeen(ann)); diff != "" {
		t.Errorf("ann's events (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(map[string]bool{ja: true, jb: true}, jobsSeen(e.admin)); diff != "" {
		t.Errorf("admin's events (-want +got):\n%s", diff)
	}
}

// TestCrossOriginRefused: a browser request from another origin may not
// change anything; same-origin and non-browser requests may.
func TestCrossOriginRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	host := strings.TrimPrefix(e.http.URL, "http://")
	tests := map[string]struct {
		header map[string]string
		want   int
	}{
		"no origin (CLI)":    {want: http.StatusOK},
		"same origin":        {header: map[string]string{"Origin": "http://" + host}, want: http.StatusOK},
		"other origin":       {header: map[string]string{"Origin": "https://evil.example"}, want: http.StatusForbidden},
		"cross-site fetch":   {header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
		"same-origin fetch":  {header: map[string]string{"Sec-Fetch-Site": "same-origin"}, want: http.StatusOK},
		"other origin, null": {header: map[string]string{"Origin": "null"}, want: http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, req{Method: "PUT", Path: "/v1/projects/a/secrets/K", Token: e.admin, Header: tc.header, Body: []byte(`{"value": "value-1234"}`)})
			if r.Status != tc.want {
				t.Errorf("status %d, want %d: %s", r.Status, tc.want, r.Body)
			}
		})
	}
}

// TestHostPathsAdminOnly: a job may run in a host folder (an absolute
// workdir) only when an admin submits it; nobody may leave the job's tree
// with "..".
func TestHostPathsAdminOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	e.grant(t, "mo", "a", model.RoleProjectAdmin)
	_, mo := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "mo"})
	job := func(workdir string) []byte {
		return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "w", "project": "a"},
			"spec": {"resources": {"gpus": 0}, "run": {"command": ["true"], "workdir": "` + workdir + `"}}}`)
	}
	tests := map[string]struct {
		token, workdir string
		want           int
	}{
		"admin, host folder":         {token: e.admin, workdir: "/srv/data", want: http.StatusCreated},
		"project-admin, host folder": {token: mo, workdir: "/srv/data", want: http.StatusBadRequest},
		"project-admin, relative":    {token: mo, workdir: "sub/dir", want: http.StatusCreated},
		"admin, escaping":            {token: e.admin, workdir: "../etc", want: http.StatusBadRequest},
		"admin, unclean":             {token: e.admin, workdir: "/srv/../etc", want: http.StatusBadRequest},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: tc.token, Body: job(tc.workdir)})
			if r.Status != tc.want {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.want, r.Body)
			}
			if tc.want == http.StatusBadRequest {
				if diff := gocmp.Diff([]string{"spec.run.workdir"}, problemPaths(problem(t, r))); diff != "" {
					t.Errorf("paths (-want +got):\n%s", diff)
				}
			}
		})
	}
}
