package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// projectService is a valid Service manifest in project with auth mode;
// it scales from zero and gives up on a first replica after 1 s.
func projectService(name, project, auth string) []byte {
	return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Service",
  "metadata": {"name": "` + name + `", "project": "` + project + `"},
  "spec": {"template": {"run": {"command": ["serve"]}}, "port": 18000, "replicas": {"min": 0, "max": 2},
    "autoscaling": {"metric": "inflight", "target": 4, "scaleFromZeroTimeout": "1s"}, "auth": {"mode": "` + auth + `"}}}`)
}

// TestServicesAreProjectScoped: a tenant sees, changes and calls only the
// services of projects it holds a role in; a public service anyone may
// call; a bad manifest names its fields.
func TestServicesAreProjectScoped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for _, s := range [][]byte{projectService("priv-a", "a", "token"), projectService("pub-a", "a", "public")} {
		if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: s, Token: e.admin}); r.Status != http.StatusCreated {
			t.Fatalf("apply: %d %s", r.Status, r.Body)
		}
	}
	e.grant(t, "bob", "b", model.RoleMember)
	e.grant(t, "ann", "a", model.RoleViewer)
	_, bob := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "bob"})
	_, ann := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "ann"})

	var l api.ServiceList
	if r := e.do(t, req{Method: "GET", Path: "/v1/services", Token: bob}); json.Unmarshal(r.Body, &l) != nil || len(l.Services) != 0 {
		t.Fatalf("bob (project b) lists a's services: %s", r.Body)
	}
	if r := e.do(t, req{Method: "GET", Path: "/v1/services/priv-a", Token: bob}); r.Status != http.StatusNotFound {
		t.Fatalf("bob reads a's service: %d", r.Status)
	}
	if r := e.do(t, req{Method: "DELETE", Path: "/v1/services/priv-a", Token: bob}); r.Status != http.StatusNotFound {
		t.Fatalf("bob deletes a's service: %d", r.Status)
	}
	if r := e.do(t, req{Method: "DELETE", Path: "/v1/services/priv-a", Token: ann}); r.Status != http.StatusForbidden {
		t.Fatalf("a viewer deletes a service: %d", r.Status)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: projectService("priv-a", "b", "token"), Token: bob}); r.Status != http.StatusConflict {
		t.Fatalf("bob takes a's service name in b: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "GET", Path: "/v1/services/priv-a", Token: ann}); r.Status != http.StatusOK {
		t.Fatalf("ann reads her project's service: %d", r.Status)
	}

	call := func(path, token string) int {
		r := e.do(t, req{Method: "GET", Path: path, Token: token})
		return r.Status
	}
	if got := call("/services/priv-a/v1/models", bob); got != http.StatusForbidden {
		t.Fatalf("bob calls a's private service: %d", got)
	}
	if got := call("/services/priv-a/v1/models", ""); got != http.StatusUnauthorized {
		t.Fatalf("no token calls a private service: %d", got)
	}
	// Allowed, and no replica comes within 1 s (nothing reconciles here).
	if got := call("/services/priv-a/v1/models", ann); got != http.StatusServiceUnavailable {
		t.Fatalf("ann calls her project's service: %d", got)
	}
	if got := call("/services/pub-a/v1/models", ""); got != http.StatusServiceUnavailable {
		t.Fatalf("anyone calls a public service: %d", got)
	}

	r := e.do(t, req{Method: "POST", Path: "/v1/services", Token: e.admin, Body: []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Service",
  "metadata": {"name": "bad"}, "spec": {"template": {"run": {"command": ["x"]}}, "port": 0, "autoscaling": {"metric": "p95"}}}`)})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "spec.port") || !strings.Contains(string(r.Body), "spec.autoscaling.metric") {
		t.Fatalf("bad manifest: %d %s", r.Status, r.Body)
	}
}
