package api_test

import (
	"net/http"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestNamesAndFieldsRefused: names people read (token subjects and labels,
// the users of grants, projects, queues) refuse NUL, control characters,
// bidi overrides and absurd lengths; absurd resources are refused; and the
// agent and archive routes' 400s name the field at fault.
func TestNamesAndFieldsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{Archives: true})
	_, agent := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-x"})
	long := strings.Repeat("a", 300)
	job := func(spec string) []byte {
		return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"run": {"command": ["true"]}, ` + spec + `}}`)
	}
	tests := map[string]struct {
		r    req
		want []string // field paths
	}{
		"token subject with NUL":             {req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "ali\u0000ce", "ttl": "1h"}`)}, []string{"subject"}},
		"token subject with a newline":       {req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "alice\nadmin", "ttl": "1h"}`)}, []string{"subject"}},
		"token subject with a bidi override": {req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "ali\u202ece", "ttl": "1h"}`)}, []string{"subject"}},
		"token subject too long":             {req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "` + long + `", "ttl": "1h"}`)}, []string{"subject"}},
		"token name with an escape":          {req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "alice", "name": "ci\u001b[2J", "ttl": "1h"}`)}, []string{"name"}},
		"grant user with NUL":                {req{Method: "PUT", Path: "/v1/grants", Body: []byte(`{"user": "bob\u0000", "project": "nlp", "role": "member"}`)}, []string{"user"}},
		"grant user with a bidi isolate":     {req{Method: "PUT", Path: "/v1/grants", Body: []byte(`{"user": "\u2066bob", "project": "nlp", "role": "member"}`)}, []string{"user"}},
		"grant user too long":                {req{Method: "PUT", Path: "/v1/grants", Body: []byte(`{"user": "` + long + `", "project": "nlp", "role": "member"}`)}, []string{"user"}},
		"grant project with a control":       {req{Method: "PUT", Path: "/v1/grants", Body: []byte(`{"user": "bob", "project": "nlp\u0007", "role": "member"}`)}, []string{"project"}},
		"job project with a bidi override":   {req{Method: "POST", Path: "/v1/jobs", Body: []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "x", "project": "nlp\u202e"}, "spec": {"run": {"command": ["true"]}}}`)}, []string{"metadata.project"}},
		"job queue with NUL":                 {req{Method: "POST", Path: "/v1/jobs", Body: job(`"queue": "research\u0000"`)}, []string{"spec.queue"}},
		"job queue too long":                 {req{Method: "POST", Path: "/v1/jobs", Body: job(`"queue": "` + long + `"`)}, []string{"spec.queue"}},
		"cpu 1e308":                          {req{Method: "POST", Path: "/v1/jobs", Body: job(`"resources": {"cpu": 1e308}`)}, []string{"spec.resources.cpu"}},
		"queue name with a control":          {req{Method: "PUT", Path: "/v1/queues/a%07b", Body: []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Queue", "spec": {}}`)}, []string{"metadata.name"}},
		"jobs of a project with NUL":         {req{Method: "GET", Path: "/v1/jobs?project=nlp%00"}, []string{"query.project"}},
		"agent message of the wrong type":    {req{Method: "POST", Path: "/v1/agent/sync", Token: agent, Body: []byte(`{"nodeId": "node-x", "wait": true}`)}, []string{"wait"}},
		"agent message not JSON":             {req{Method: "POST", Path: "/v1/agent/register", Token: agent, Body: []byte(`{`)}, []string{"body"}},
		"archive digest malformed":           {req{Method: "GET", Path: "/v1/archives/sha256:xyz", Token: agent}, []string{"path.digest"}},
		"archive digest mismatch": {req{Method: "POST", Path: "/v1/archives?digest=sha256:" + strings.Repeat("0", 64), Body: []byte("not the archive")},
			[]string{"query.digest"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tt.r.Token == "" {
				tt.r.Token = e.admin
			}
			got := e.do(t, tt.r)
			if got.Status != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400; body %s", got.Status, got.Body)
			}
			if diff := gocmp.Diff(tt.want, problemPaths(problem(t, got))); diff != "" {
				t.Fatalf("field paths (-want +got):\n%s\nbody %s", diff, got.Body)
			}
		})
	}
}

// TestGrantOnUndeclaredProjectWarns: a grant on a project the fleet does
// not declare holds, with a warning that says how to declare it.
func TestGrantOnUndeclaredProjectWarns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	decodeReply[api.ApplyView](t, e.do(t, req{Method: "POST", Path: "/v1/apply", Token: e.admin, Body: fleetBody(t, "", projectDoc)}), http.StatusCreated)
	tests := map[string]struct {
		project string
		warns   bool
	}{
		"declared project": {"nlp", false},
		"default project":  {model.DefaultProject, false},
		"global":           {model.AllProjects, false},
		"undeclared":       {"nlpp", true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			role := "member"
			if tt.project == model.AllProjects {
				role = "admin"
			}
			got := decodeReply[api.GrantResult](t, e.do(t, req{Method: "PUT", Path: "/v1/grants", Token: e.admin,
				Body: []byte(`{"user": "bob", "project": "` + tt.project + `", "role": "` + role + `"}`)}), http.StatusOK)
			warned := len(got.Warnings) == 1 && strings.Contains(got.Warnings[0], "kind: Project") && strings.Contains(got.Warnings[0], "gpufleet apply")
			if warned != tt.warns || len(got.Warnings) > 1 {
				t.Fatalf("warnings = %q, want a warning on how to declare it: %v", got.Warnings, tt.warns)
			}
		})
	}
}

// TestPlanSeesQueuesMadeThroughTheQueueAPI: a queue made with `gpufleet
// queues apply` exists, so a plan that declares it shows an update of the
// fields that differ (and nothing when none does), not a create.
func TestPlanSeesQueuesMadeThroughTheQueueAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	put := e.do(t, req{Method: "PUT", Path: "/v1/queues/research", Token: e.admin,
		Body: []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Queue", "metadata": {"name": "research"}, "spec": {"cohort": "ml", "quota": {"H100": {"nominal": 4}}}}`)})
	if put.Status != http.StatusCreated && put.Status != http.StatusOK {
		t.Fatalf("queue PUT = %d %s", put.Status, put.Body)
	}
	plan := decodeReply[api.PlanView](t, e.do(t, req{Method: "POST", Path: "/v1/plan", Token: e.admin, Body: fleetBody(t, "", queueDoc)}), http.StatusOK)
	if diff := gocmp.Diff([]string{"update Queue/research"}, actions(plan.Changes)); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}
	var paths []string
	for _, f := range plan.Changes[0].Fields {
		paths = append(paths, f.Path)
	}
	if diff := gocmp.Diff([]string{"spec.quota.H100.nominal"}, paths); diff != "" {
		t.Fatalf("changed fields (-want +got):\n%s", diff)
	}
	applied := decodeReply[api.ApplyView](t, e.do(t, req{Method: "POST", Path: "/v1/apply", Token: e.admin, Body: fleetBody(t, "", queueDoc)}), http.StatusCreated)
	if diff := gocmp.Diff([]string{"update Queue/research"}, actions(applied.Changes)); diff != "" {
		t.Fatalf("apply (-want +got):\n%s", diff)
	}
	again := decodeReply[api.PlanView](t, e.do(t, req{Method: "POST", Path: "/v1/plan", Token: e.admin, Body: fleetBody(t, "", queueDoc)}), http.StatusOK)
	if diff := gocmp.Diff([]fleet.Change{}, again.Changes); diff != "" {
		t.Fatalf("plan after apply (-want +got):\n%s", diff)
	}
}
