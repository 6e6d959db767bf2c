package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestTokenKindsAndScopes runs every kind of token against the routes it may
// and may not call. The job token is the one the controller hands a
// running replica in GPUFLEET_JOB_TOKEN.
func TestTokenKindsAndScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	agent := e.registerNode(t, 1)
	own := e.submit(t, jobManifest("own"))
	replicas := agent.waitReplicas(t, 1)
	if replicas[0].JobID != own {
		t.Fatalf("the node runs job %s, want %s", replicas[0].JobID, own)
	}
	jobToken := replicas[0].Env["GPUFLEET_JOB_TOKEN"]
	if !strings.HasPrefix(jobToken, "gfj_") {
		t.Fatalf("GPUFLEET_JOB_TOKEN = %q, want a job token", jobToken)
	}
	other := e.submit(t, jobManifest("other")) // stays queued: the node is full

	created := e.do(t, req{Method: "POST", Path: "/v1/tokens", Token: e.admin, Body: []byte(`{"kind": "agent", "subject": "` + agent.node + `", "ttl": "1h"}`)})
	if created.Status != http.StatusCreated {
		t.Fatalf("creating agent token: %d %s", created.Status, created.Body)
	}
	var tc api.TokenCreated
	if err := json.Unmarshal(created.Body, &tc); err != nil {
		t.Fatal(err)
	}
	if tc.Token.Kind != model.TokenAgent || !strings.HasPrefix(tc.Secret, "gfa_") {
		t.Fatalf("created %s token with secret %.4s…, want an agent token", tc.Token.Kind, tc.Secret)
	}
	agentToken := tc.Secret
	_, user := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "bob"})
	e.grant(t, "bob", model.DefaultProject, model.RoleMember)

	job := jobManifest("new")
	tests := map[string]struct {
		token string
		r     req
		want  int
	}{
		"job token reads its job":              {jobToken, req{Method: "GET", Path: "/v1/jobs/" + own}, 200},
		"job token reads its logs":             {jobToken, req{Method: "GET", Path: "/v1/jobs/" + own + "/logs"}, 200},
		"job token reads another job":          {jobToken, req{Method: "GET", Path: "/v1/jobs/" + other}, 403},
		"job token reads another job's logs":   {jobToken, req{Method: "GET", Path: "/v1/jobs/" + other + "/logs"}, 403},
		"job token reads a job that is not":    {jobToken, req{Method: "GET", Path: "/v1/jobs/j-nosuchjob"}, 403},
		"job token lists jobs":                 {jobToken, req{Method: "GET", Path: "/v1/jobs"}, 403},
		"job token submits":                    {jobToken, req{Method: "POST", Path: "/v1/jobs", Body: job}, 403},
		"job token cancels its job":            {jobToken, req{Method: "POST", Path: "/v1/jobs/" + own + "/cancel"}, 403},
		"job token lists nodes":                {jobToken, req{Method: "GET", Path: "/v1/nodes"}, 403},
		"job token lists tokens":               {jobToken, req{Method: "GET", Path: "/v1/tokens"}, 403},
		"job token reads metrics":              {jobToken, req{Method: "GET", Path: "/metrics"}, 403},
		"job token reads the version":          {jobToken, req{Method: "GET", Path: "/v1/version"}, 200},
		"agent token reads a job":              {agentToken, req{Method: "GET", Path: "/v1/jobs/" + own}, 403},
		"agent token reads logs":               {agentToken, req{Method: "GET", Path: "/v1/jobs/" + own + "/logs"}, 403},
		"agent token lists jobs":               {agentToken, req{Method: "GET", Path: "/v1/jobs"}, 403},
		"agent token submits":                  {agentToken, req{Method: "POST", Path: "/v1/jobs", Body: job}, 403},
		"agent token cancels":                  {agentToken, req{Method: "POST", Path: "/v1/jobs/" + own + "/cancel"}, 403},
		"agent token lists tokens":             {agentToken, req{Method: "GET", Path: "/v1/tokens"}, 403},
		"agent token reads the API document":   {agentToken, req{Method: "GET", Path: "/v1/openapi.json"}, 200},
		"user token lists tokens":              {user, req{Method: "GET", Path: "/v1/tokens"}, 403},
		"user token creates a token":           {user, req{Method: "POST", Path: "/v1/tokens", Body: []byte(`{"kind": "user", "subject": "bob", "admin": true, "ttl": "1h"}`)}, 403},
		"user token revokes a token":           {user, req{Method: "DELETE", Path: "/v1/tokens/" + tc.Token.ID}, 403},
		"user token lists jobs":                {user, req{Method: "GET", Path: "/v1/jobs"}, 200},
		"user token reads a job":               {user, req{Method: "GET", Path: "/v1/jobs/" + own}, 200},
		"user token lists nodes":               {user, req{Method: "GET", Path: "/v1/nodes"}, 200},
		"admin token lists tokens":             {e.admin, req{Method: "GET", Path: "/v1/tokens"}, 200},
		"admin token reads another user's job": {e.admin, req{Method: "GET", Path: "/v1/jobs/" + other}, 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := tc.r
			r.Token = tc.token
			got := e.do(t, r)
			if got.Status != tc.want {
				t.Fatalf("status = %d, want %d; body %s", got.Status, tc.want, got.Body)
			}
			if tc.want == http.StatusForbidden {
				problem(t, got)
				if h := got.Header.Get("WWW-Authenticate"); h != "" {
					t.Errorf("a 403 carries WWW-Authenticate %q: the token is valid, only not allowed", h)
				}
			}
		})
	}
	// Nothing above may have changed state: the refused submissions and
	// cancellations made no job and stopped none.
	if diff := cmp.Diff(2, len(e.ctrl.Jobs(model.JobFilter{}))); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(1, countKind(e.ctrl.Identity().Tokens(), model.TokenAgent)); diff != "" {
		t.Errorf("agent tokens (-want +got):\n%s", diff)
	}
}

func countKind(toks []*model.Token, k model.TokenKind) int {
	n := 0
	for _, t := range toks {
		if t.Kind == k {
			n++
		}
	}
	return n
}

// TestTokenLifecycle: a token works until it expires or is revoked, and
// then gets 401 at once.
func TestTokenLifecycle(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	e := newEnv(t, envConfig{Clock: clk})
	e.grant(t, "carol", model.DefaultProject, model.RoleViewer)
	listJobs := func(t *testing.T, token string) int {
		t.Helper()
		r := e.do(t, req{Method: "GET", Path: "/v1/jobs", Token: token})
		if r.Status == http.StatusUnauthorized {
			problem(t, r)
			if r.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		}
		return r.Status
	}
	create := func(t *testing.T, ttl string) api.TokenCreated {
		t.Helper()
		r := e.do(t, req{Method: "POST", Path: "/v1/tokens", Token: e.admin, Body: []byte(`{"kind": "user", "subject": "carol", "ttl": "` + ttl + `"}`)})
		if r.Status != http.StatusCreated {
			t.Fatalf("creating token: %d %s", r.Status, r.Body)
		}
		var tc api.TokenCreated
		if err := json.Unmarshal(r.Body, &tc); err != nil {
			t.Fatal(err)
		}
		return tc
	}

	t.Run("expiry", func(t *testing.T) {
		tc := create(t, "10m")
		before := listJobs(t, tc.Secret)
		clk.Advance(10 * time.Minute) // ExpiresAt is exclusive
		after := listJobs(t, tc.Secret)
		if diff := cmp.Diff([]int{200, 401}, []int{before, after}); diff != "" {
			t.Errorf("statuses before and after expiry (-want +got):\n%s", diff)
		}
	})
	t.Run("revocation", func(t *testing.T) {
		tc := create(t, "1h")
		before := listJobs(t, tc.Secret)
		del := e.do(t, req{Method: "DELETE", Path: "/v1/tokens/" + tc.Token.ID, Token: e.admin})
		after := listJobs(t, tc.Secret)
		if diff := cmp.Diff([]int{200, 204, 401}, []int{before, del.Status, after}); diff != "" {
			t.Errorf("statuses before, revoking and after (-want +got):\n%s", diff)
		}
		again := e.do(t, req{Method: "DELETE", Path: "/v1/tokens/tok-nosuchtoken", Token: e.admin})
		if again.Status != http.StatusNotFound {
			t.Errorf("revoking an unknown token: status %d, want 404", again.Status)
		}
	})
	t.Run("listing hides secrets", func(t *testing.T) {
		tc := create(t, "1h")
		r := e.do(t, req{Method: "GET", Path: "/v1/tokens", Token: e.admin})
		if r.Status != http.StatusOK {
			t.Fatalf("status %d", r.Status)
		}
		if strings.Contains(string(r.Body), tc.Secret) || strings.Contains(string(r.Body), tc.Secret[4:]) {
			t.Error("GET /v1/tokens shows a secret")
		}
	})
	t.Run("invalid requests", func(t *testing.T) {
		tests := map[string]struct {
			body string
			want []string
		}{
			"job kind":       {`{"kind": "job", "subject": "j-x", "ttl": "1h"}`, []string{"kind"}},
			"endless":        {`{"kind": "user", "subject": "dave", "ttl": "0s"}`, []string{"ttl"}},
			"too long":       {`{"kind": "user", "subject": "dave", "ttl": "400d"}`, []string{"ttl"}},
			"admin agent":    {`{"kind": "agent", "subject": "n-1", "admin": true, "ttl": "1h"}`, []string{"admin"}},
			"everything":     {`{"kind": "root", "ttl": "-1h"}`, []string{"kind", "subject", "ttl"}},
			"unknown field":  {`{"kind": "user", "subject": "dave", "ttl": "1h", "scope": "all"}`, []string{"scope"}},
			"not a duration": {`{"kind": "user", "subject": "dave", "ttl": "soon"}`, []string{"ttl"}},
			"not JSON":       {`{"kind": `, []string{"body"}},
			"subject type":   {`{"kind": "user", "subject": 7, "ttl": "1h"}`, []string{"subject"}},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				r := e.do(t, req{Method: "POST", Path: "/v1/tokens", Token: e.admin, Body: []byte(tc.body)})
				if r.Status != http.StatusBadRequest {
					t.Fatalf("status = %d, want 400; body %s", r.Status, r.Body)
				}
				if diff := cmp.Diff(tc.want, problemPaths(problem(t, r))); diff != "" {
					t.Errorf("problem paths (-want +got):\n%s", diff)
				}
			})
		}
	})
}
