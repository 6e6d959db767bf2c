package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestAgentTokensSpeakOnlyForTheirNode: the agent protocol answers agent
// tokens only, each for the node that is its subject; a first registration
// without a node id takes the token's subject; a node the server does not
// know is told to register (404).
func TestAgentTokensSpeakOnlyForTheirNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	_, nodeX := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-x"})
	_, nodeZ := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-z"})
	_, user := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "alice"})
	body := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	got := e.do(t, req{Method: "POST", Path: "/v1/agent/register", Token: nodeX, Body: body(agentapi.Registration{Name: "x", Provider: "static"})})
	var reg agentapi.RegisterResponse
	if got.Status != http.StatusOK || json.Unmarshal(got.Body, &reg) != nil || reg.NodeID != "node-x" {
		t.Fatalf("first registration = %d %s, want 200 naming node-x", got.Status, got.Body)
	}

	tests := map[string]struct {
		r    req
		want int
	}{
		"re-register own node":   {req{Method: "POST", Path: "/v1/agent/register", Token: nodeX, Body: body(agentapi.Registration{NodeID: "node-x"})}, http.StatusOK},
		"register another node":  {req{Method: "POST", Path: "/v1/agent/register", Token: nodeX, Body: body(agentapi.Registration{NodeID: "node-y"})}, http.StatusForbidden},
		"sync own node":          {req{Method: "POST", Path: "/v1/agent/sync", Token: nodeX, Body: body(agentapi.SyncRequest{NodeID: "node-x"})}, http.StatusOK},
		"sync another node":      {req{Method: "POST", Path: "/v1/agent/sync", Token: nodeX, Body: body(agentapi.SyncRequest{NodeID: "node-z"})}, http.StatusForbidden},
		"sync unregistered node": {req{Method: "POST", Path: "/v1/agent/sync", Token: nodeZ, Body: body(agentapi.SyncRequest{NodeID: "node-z"})}, http.StatusNotFound},
		"logs for another node":  {req{Method: "POST", Path: "/v1/agent/logs", Token: nodeX, Body: body(agentapi.LogChunk{NodeID: "node-z", ReplicaID: "a-r0"})}, http.StatusForbidden},
		"admin user token":       {req{Method: "POST", Path: "/v1/agent/sync", Token: e.admin, Body: body(agentapi.SyncRequest{NodeID: "node-x"})}, http.StatusForbidden},
		"user token":             {req{Method: "POST", Path: "/v1/agent/register", Token: user, Body: body(agentapi.Registration{})}, http.StatusForbidden},
		"no token":               {req{Method: "POST", Path: "/v1/agent/sync", Body: body(agentapi.SyncRequest{NodeID: "node-x"})}, http.StatusUnauthorized},
		"agent token on jobs":    {req{Method: "GET", Path: "/v1/jobs", Token: nodeX}, http.StatusForbidden},
		"malformed message":      {req{Method: "POST", Path: "/v1/agent/sync", Token: nodeX, Body: []byte("{")}, http.StatusBadRequest},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := e.do(t, tt.r)
			if got.Status != tt.want {
				t.Fatalf("status = %d, want %d; body %s", got.Status, tt.want, got.Body)
			}
			if tt.want >= 400 {
				problem(t, got)
			}
		})
	}
}

// TestAgentTokenSubjectIsANodeID: an agent token's subject becomes a node
// id, so it must be a valid one.
func TestAgentTokenSubjectIsANodeID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	for name, tt := range map[string]struct {
		subject string
		want    int
	}{
		"node id":         {"gpu-box-1", http.StatusCreated},
		"upper case":      {"GPU-Box", http.StatusBadRequest},
		"path characters": {"../x", http.StatusBadRequest},
		"too long":        {"a123456789012345678901234567890123456789012345678901234567890123", http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := e.do(t, req{Method: "POST", Path: "/v1/tokens", Token: e.admin,
				Body: []byte(`{"kind":"agent","subject":"` + tt.subject + `","ttl":"1h"}`)})
			if got.Status != tt.want {
				t.Fatalf("status = %d, want %d; body %s", got.Status, tt.want, got.Body)
			}
			if tt.want == http.StatusBadRequest {
				if diff := problemPaths(problem(t, got)); len(diff) != 1 || diff[0] != "subject" {
					t.Errorf("problem paths = %v, want [subject]", diff)
				}
			}
		})
	}
}
