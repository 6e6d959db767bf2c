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
// services of projects it holds a role in (a private service of another
// project answers 404 through the proxy as in the API); a public service
// anyone may call; an apiKey service only its keys; a bad manifest names
// its fields.
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
	// To bob, a's private service does not exist, as in the API; his token
	// is valid, so this is not a 401.
	if got := call("/services/priv-a/v1/models", bob); got != http.StatusNotFound {
		t.Fatalf("bob calls a's private service: %d", got)
	}
	if r := e.do(t, req{Method: "GET", Path: "/services/priv-a/v1/models", Token: bob}); strings.Contains(string(r.Body), `project a`) {
		t.Fatalf("the refusal names the service's project: %s", r.Body)
	}
	_, agent := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-x"})
	if got := call("/services/priv-a/v1/models", agent); got != http.StatusUnauthorized {
		t.Fatalf("an agent token calls a private service: %d", got)
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

	// apiKey: the key is a secret of the project; a gpufleet token, even
	// an admin's, is not a key; the secret must exist when applied.
	keyed := []byte(strings.Replace(string(projectService("keyed-a", "a", "apiKey")), `"mode": "apiKey"`, `"mode": "apiKey", "secrets": ["LLM_KEY"]`, 1))
	if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: keyed, Token: e.admin}); r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "spec.auth.secrets[0]") {
		t.Fatalf("apply naming a missing secret: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "PUT", Path: "/v1/projects/a/secrets/LLM_KEY", Body: []byte(`{"value": "sk-a-1"}`), Token: e.admin}); r.Status != http.StatusOK {
		t.Fatalf("put secret: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: keyed, Token: e.admin}); r.Status != http.StatusCreated {
		t.Fatalf("apply: %d %s", r.Status, r.Body)
	}
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {e.admin, 401}, {ann, 401}, {"sk-a-2", 401}, {"sk-a-1", 503}} {
		if got := call("/services/keyed-a/v1/models", c.token); got != c.want {
			t.Errorf("apiKey service with %.8q…: %d, want %d", c.token, got, c.want)
		}
	}
	// Applying a's services made a's replica key; users cannot write it.
	if r := e.do(t, req{Method: "GET", Path: "/v1/projects/a/secrets", Token: e.admin}); !strings.Contains(string(r.Body), model.ServiceKeySecret) {
		t.Fatalf("no replica key in project a: %s", r.Body)
	}
	if r := e.do(t, req{Method: "PUT", Path: "/v1/projects/a/secrets/" + model.ServiceKeySecret, Body: []byte(`{"value": "mine"}`), Token: e.admin}); r.Status != http.StatusBadRequest {
		t.Fatalf("a user wrote the replica key: %d %s", r.Status, r.Body)
	}

	r := e.do(t, req{Method: "POST", Path: "/v1/services", Token: e.admin, Body: []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Service",
  "metadata": {"name": "bad"}, "spec": {"template": {"run": {"command": ["x"]}}, "port": 0, "autoscaling": {"metric": "gpu-util"}}}`)})
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "spec.port") || !strings.Contains(string(r.Body), "spec.autoscaling.metric") {
		t.Fatalf("bad manifest: %d %s", r.Status, r.Body)
	}
}
