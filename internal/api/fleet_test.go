package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/model"
)

const (
	poolDoc    = `{"apiVersion": "gpufleet.dev/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {"provider": "sim", "requirements": {"gpuModels": ["h100"], "gpusPerNode": 8}, "capacityTypes": ["spot", "on-demand"], "min": 1, "max": 4}}`
	bigPoolDoc = `{"apiVersion": "gpufleet.dev/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {"provider": "sim", "requirements": {"gpuModels": ["H100"], "gpusPerNode": 8}, "capacityTypes": ["spot", "on-demand"], "min": 2, "max": 4}}`
	queueDoc   = `{"apiVersion": "gpufleet.dev/v1", "kind": "Queue", "metadata": {"name": "research"}, "spec": {"cohort": "ml", "quota": {"h100": {"nominal": 8}}}}`
	projectDoc = `{"apiVersion": "gpufleet.dev/v1", "kind": "Project", "metadata": {"name": "nlp"}, "spec": {"maxGPUsPerJob": 16}}`
)

func fleetBody(tb testing.TB, message string, docs ...string) []byte {
	tb.Helper()
	raw := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		raw[i] = json.RawMessage(d)
	}
	b, err := json.Marshal(api.FleetRequest{Documents: raw, Message: message})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func decodeReply[T any](tb testing.TB, r reply, status int) T {
	tb.Helper()
	if r.Status != status {
		tb.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		tb.Fatalf("decoding %s: %v", r.Body, err)
	}
	return v
}

func actions(changes []fleet.Change) []string {
	out := []string{}
	for _, c := range changes {
		out = append(out, string(c.Action)+" "+c.Kind+"/"+c.Name)
	}
	return out
}

// TestFleetRoundTrip: plan, apply, re-apply (no-op), change, history,
// rollback, and a restart on the same database keeps every revision and
// the applied state.
func TestFleetRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Run("first server", func(t *testing.T) {
		e := newEnv(t, envConfig{Dir: dir})
		post := func(path string, body []byte) reply {
			return e.do(t, req{Method: "POST", Path: path, Token: e.admin, Body: body})
		}
		plan := decodeReply[api.PlanView](t, post("/v1/plan", fleetBody(t, "", poolDoc, queueDoc, projectDoc)), http.StatusOK)
		if diff := cmp.Diff([]string{"create NodePool/gpu", "create Queue/research", "create Project/nlp"}, actions(plan.Changes)); diff != "" {
			t.Errorf("plan (-want +got):\n%s", diff)
		}
		if c := plan.Changes[0].Cost; c == nil || c.Unknown != "" || c.MinPerHour <= 0 || c.MaxPerHour != 4*c.MinPerHour {
			t.Errorf("pool cost = %+v, want min > 0 and max = 4 × min", c)
		}

		applied := decodeReply[api.ApplyView](t, post("/v1/apply", fleetBody(t, "first", poolDoc, queueDoc, projectDoc)), http.StatusCreated)
		if !applied.Changed || applied.Revision.Number != 1 || applied.Revision.Author != "admin" || applied.Revision.Message != "first" {
			t.Errorf("apply = %+v", applied)
		}
		q, err := e.ctrl.Queue("research")
		if err != nil || q.Spec.Cohort != "ml" || q.Spec.Quota["H100"].Nominal != 8 {
			t.Errorf("queue research after apply = %+v, %v; want cohort ml and H100 quota 8", q, err)
		}
		pools := e.ctrl.NodePools()
		if len(pools) != 1 || pools[0].Name != "gpu" || pools[0].Revision != 1 || pools[0].Spec.Requirements.GPUModels[0] != "H100" {
			t.Errorf("NodePools() = %+v", pools)
		}

		again := decodeReply[api.ApplyView](t, post("/v1/apply", fleetBody(t, "again", queueDoc, projectDoc, poolDoc)), http.StatusOK)
		if again.Changed || again.Revision.Number != 1 || len(again.Changes) != 0 {
			t.Errorf("re-apply = %+v, want no change at revision 1", again)
		}

		second := decodeReply[api.ApplyView](t, post("/v1/apply", fleetBody(t, "bigger, no queue", bigPoolDoc, projectDoc)), http.StatusCreated)
		if diff := cmp.Diff([]string{"update NodePool/gpu", "delete Queue/research"}, actions(second.Changes)); diff != "" {
			t.Errorf("second apply (-want +got):\n%s", diff)
		}
		if _, err := e.ctrl.Queue("research"); err == nil {
			t.Errorf("queue research survived its removal from the fleet")
		}

		rb := decodeReply[api.ApplyView](t, post("/v1/rollback", []byte(`{"to": 1}`)), http.StatusCreated)
		if rb.Revision.Number != 3 || rb.Revision.RollbackOf != 1 || rb.Revision.Message != "rollback to revision 1" {
			t.Errorf("rollback revision = %+v", rb.Revision)
		}
		if _, err := e.ctrl.Queue("research"); err != nil {
			t.Errorf("rollback did not restore queue research: %v", err)
		}
		drift := decodeReply[api.DriftReport](t, e.do(t, req{Method: "GET", Path: "/v1/drift", Token: e.admin}), http.StatusOK)
		if drift.Revision != 3 || !hasIssue(drift.Findings, "NodePool", "gpu", fleet.BelowMin) {
			t.Errorf("drift = %+v, want pool gpu below min at revision 3", drift)
		}
	})
	t.Run("restarted server", func(t *testing.T) {
		e := newEnv(t, envConfig{Dir: dir})
		list := decodeReply[api.RevisionList](t, e.do(t, req{Method: "GET", Path: "/v1/revisions", Token: e.admin}), http.StatusOK)
		var got []string
		for _, r := range list.Revisions {
			got = append(got, r.Message)
			if r.Documents != nil {
				t.Errorf("revision %d lists its documents", r.Number)
			}
		}
		if diff := cmp.Diff([]string{"first", "bigger, no queue", "rollback to revision 1"}, got); diff != "" || list.Current != 3 {
			t.Errorf("history after restart, current %d (-want +got):\n%s", list.Current, diff)
		}
		rev := decodeReply[model.Revision](t, e.do(t, req{Method: "GET", Path: "/v1/revisions/1", Token: e.admin}), http.StatusOK)
		if len(rev.Documents) != 3 {
			t.Errorf("revision 1 has %d documents, want 3", len(rev.Documents))
		}
		pools := e.ctrl.NodePools()
		// Revision 3 re-applied revision 1's pool, a change from revision 2.
		if len(pools) != 1 || pools[0].Spec.Min != 1 || pools[0].Revision != 3 {
			t.Errorf("NodePools() after restart = %+v", pools)
		}
		if len(e.ctrl.Projects()) != 1 {
			t.Errorf("Projects() after restart = %+v", e.ctrl.Projects())
		}
		plan := decodeReply[api.PlanView](t, e.do(t, req{Method: "POST", Path: "/v1/plan", Token: e.admin, Body: fleetBody(t, "", poolDoc, queueDoc, projectDoc)}), http.StatusOK)
		if plan.BaseRevision != 3 || len(plan.Changes) != 0 {
			t.Errorf("plan after restart = %+v, want no changes against revision 3", plan)
		}
	})
}

func hasIssue(fs []fleet.Finding, kind, name, issue string) bool {
	for _, f := range fs {
		if f.Kind == kind && f.Name == name && f.Issue == issue {
			return true
		}
	}
	return false
}

func TestFleetRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	_, user := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "alice"})
	e.grant(t, "alice", model.DefaultProject, model.RoleViewer)
	tests := map[string]struct {
		path, token string
		body        []byte
		status      int
		paths       []string
	}{
		"field paths per document": {
			path: "/v1/plan", body: fleetBody(t, "", poolDoc, `{"apiVersion": "gpufleet.dev/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {"provider": "gce", "min": 2, "max": 1}}`),
			status: http.StatusBadRequest, paths: []string{"documents[1].spec.max", "documents[1].spec.provider"},
		},
		"unknown body field":             {path: "/v1/apply", body: []byte(`{"documents": [], "mesage": "x"}`), status: http.StatusBadRequest, paths: []string{"mesage"}},
		"rollback to nothing":            {path: "/v1/rollback", body: []byte(`{"to": 0}`), status: http.StatusBadRequest, paths: []string{"to"}},
		"rollback to a missing revision": {path: "/v1/rollback", body: []byte(`{"to": 9}`), status: http.StatusNotFound},
		"apply needs an admin":           {path: "/v1/apply", token: user, body: fleetBody(t, "", poolDoc), status: http.StatusForbidden},
		"stale base revision":            {path: "/v1/apply", body: []byte(`{"documents": [` + poolDoc + `], "baseRevision": 5}`), status: http.StatusConflict},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tok := tc.token
			if tok == "" {
				tok = e.admin
			}
			r := e.do(t, req{Method: "POST", Path: tc.path, Token: tok, Body: tc.body})
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.status, r.Body)
			}
			if tc.paths != nil {
				if diff := cmp.Diff(tc.paths, problemPaths(problem(t, r))); diff != "" {
					t.Errorf("problem paths (-want +got):\n%s", diff)
				}
			}
		})
	}
	// A user may plan and read.
	if r := e.do(t, req{Method: "POST", Path: "/v1/plan", Token: user, Body: fleetBody(t, "", poolDoc)}); r.Status != http.StatusOK {
		t.Errorf("plan as a user: %d %s", r.Status, r.Body)
	}
}
