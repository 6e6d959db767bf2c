package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestAgentJoin: a join token is exchanged over HTTP once, for its node's
// instance, for an agent token that then speaks for that node; it
// authorizes nothing else, and an agent token cannot join.
func TestAgentJoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	resp, err := e.ctrl.Register(ctx, agentapi.Registration{NodeID: "n-joins", Name: "i-1", Provider: "static",
		Labels: map[string]string{model.LabelInstance: "i-0123456789abcdef0"}})
	if err != nil {
		t.Fatal(err)
	}
	join, err := e.ctrl.Identity().MintJoinToken(ctx, "gpu", resp.NodeID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	body := func(id string) []byte { return []byte(`{"instanceId": "` + id + `"}`) }
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/sync", Token: join, Body: []byte(`{"nodeId": "n-joins"}`)}); r.Status != http.StatusForbidden {
		t.Fatalf("a join token syncing: %d %s, want 403", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/join", Token: join, Body: body("i-0fedcba9876543210")}); r.Status != http.StatusForbidden {
		t.Fatalf("join from another instance: %d %s, want 403", r.Status, r.Body)
	}
	r := e.do(t, req{Method: "POST", Path: "/v1/agent/join", Token: join, Body: body("i-0123456789abcdef0")})
	if r.Status != http.StatusOK {
		t.Fatalf("join: %d %s", r.Status, r.Body)
	}
	var jr agentapi.JoinResponse
	if err := json.Unmarshal(r.Body, &jr); err != nil || jr.NodeID != "n-joins" || jr.Token == "" {
		t.Fatalf("join answer %s: %v", r.Body, err)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/sync", Token: jr.Token, Body: []byte(`{"nodeId": "n-joins"}`)}); r.Status != http.StatusOK {
		t.Fatalf("the joined agent token syncing its node: %d %s", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/join", Token: join, Body: body("i-0123456789abcdef0")}); r.Status != http.StatusUnauthorized {
		t.Fatalf("a spent join token: %d %s, want 401", r.Status, r.Body)
	}
	if r := e.do(t, req{Method: "POST", Path: "/v1/agent/join", Token: jr.Token, Body: body("i-0123456789abcdef0")}); r.Status != http.StatusForbidden {
		t.Fatalf("an agent token joining: %d %s, want 403", r.Status, r.Body)
	}
}
