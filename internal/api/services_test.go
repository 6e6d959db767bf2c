package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/clock"
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

// TestProxiesSharingATokenAddUp: two `gpufleet proxy` processes sharing
// one proxy token report load for the same service; the autoscaler's load
// (the service's, as GET shows it) is their sum, a process's next report
// replaces its own last one, a process of the same id under another
// token counts apart, and a process that stops reporting stops counting
// after 5 s while the others still count.
func TestProxiesSharingATokenAddUp(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC))
	e := newEnv(t, envConfig{Clock: clk})
	if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: projectService("shared", "a", "public"), Token: e.admin}); r.Status != http.StatusCreated {
		t.Fatalf("apply: %d %s", r.Status, r.Body)
	}
	_, edge := e.token(t, model.TokenRequest{Kind: model.TokenProxy, Subject: "edge"})
	_, other := e.token(t, model.TokenRequest{Kind: model.TokenProxy, Subject: "edge-2"})
	report := func(token, proxy string, l model.ProxyLoad) {
		t.Helper()
		body, _ := json.Marshal(model.ProxyReport{Proxy: proxy, Services: map[string]model.ProxyLoad{"shared": l}})
		if r := e.do(t, req{Method: "POST", Path: "/v1/proxy/load", Body: body, Token: token}); r.Status != http.StatusNoContent {
			t.Fatalf("report from %s: %d %s", proxy, r.Status, r.Body)
		}
	}
	seen := func(step string, inFlight, waiting int, rate float64) {
		t.Helper()
		var st api.ServiceView
		r := e.do(t, req{Method: "GET", Path: "/v1/services/shared", Token: e.admin})
		if err := json.Unmarshal(r.Body, &st); err != nil {
			t.Fatalf("%s: %d %s", step, r.Status, r.Body)
		}
		if st.InFlight != inFlight || st.Load.Waiting != waiting || st.Load.Rate != rate {
			t.Errorf("%s: in flight %d, waiting %d, rate %g; want %d, %d, %g", step, st.InFlight, st.Load.Waiting, st.Load.Rate, inFlight, waiting, rate)
		}
	}
	report(edge, "p1", model.ProxyLoad{InFlight: 3, Waiting: 1, Rate: 2, Requests: 2})
	report(edge, "p2", model.ProxyLoad{InFlight: 4, Rate: 5, Requests: 3})
	seen("two processes on one token", 7, 1, 7)
	report(edge, "p1", model.ProxyLoad{InFlight: 1, Rate: 1})
	seen("p1's next report replaces its last", 5, 0, 6)
	report(other, "p1", model.ProxyLoad{InFlight: 10, Rate: 10})
	seen("the same id under another token", 15, 0, 16)

	clk.Advance(3 * time.Second)
	report(edge, "p2", model.ProxyLoad{InFlight: 4, Rate: 5})
	report(other, "p1", model.ProxyLoad{InFlight: 10, Rate: 10})
	clk.Advance(3 * time.Second)
	seen("edge's p1 silent for 6 s", 14, 0, 15)
	clk.Advance(3 * time.Second)
	seen("everyone silent for more than 5 s", 0, 0, 0)

	var st api.ServiceView
	if r := e.do(t, req{Method: "GET", Path: "/v1/services/shared", Token: e.admin}); json.Unmarshal(r.Body, &st) != nil || st.Requests != 5 {
		t.Errorf("requests counted from both processes: %d, want 5", st.Requests)
	}
}
