package api_test

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestNodesShowOnlyOwnAttempts: GET /v1/nodes (which the CLI and the
// dashboard read) names the attempt on a GPU only to a caller who may read
// its job; another tenant's attempt is "in use", and nothing in the answer
// names its job, attempt, project or user. Admins see every holder.
func TestNodesShowOnlyOwnAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	agent := e.registerNode(t, 2)
	e.grant(t, "ann", "a", model.RoleMember)
	e.grant(t, "bob", "b", model.RoleMember)
	e.grant(t, "cal", "a", model.RoleViewer)
	tokens := map[string]string{"admin": e.admin}
	for _, u := range []string{"ann", "bob", "cal"} {
		_, tokens[u] = e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: u})
	}
	submit := func(user, project string) {
		t.Helper()
		r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: tokens[user], Header: map[string]string{"Content-Type": "application/json"}, Body: projectJob("j"+project, project)})
		if r.Status != http.StatusCreated {
			t.Fatalf("%s submits in %s: %d %s", user, project, r.Status, r.Body)
		}
	}
	submit("ann", "a")
	submit("bob", "b")
	holders := map[string]model.GPUHolder{} // by project
	for _, rs := range agent.waitReplicas(t, 2) {
		j, err := e.ctrl.Job(rs.JobID)
		if err != nil {
			t.Fatal(err)
		}
		holders[j.Project] = model.GPUHolder{AttemptID: rs.AttemptID, JobID: rs.JobID, Project: j.Project, User: j.User, InUse: true}
	}
	inUse := model.GPUHolder{InUse: true}
	for name, tt := range map[string]struct {
		// want: the GPUs' holders, in any order of GPUs.
		want []model.GPUHolder
		// hidden: the project whose attempt this caller must not learn of.
		hidden string
	}{
		"admin":       {want: []model.GPUHolder{holders["a"], holders["b"]}},
		"member of a": {want: []model.GPUHolder{holders["a"], inUse}, hidden: "b"},
		"viewer of a": {want: []model.GPUHolder{holders["a"], inUse}, hidden: "b"},
		"member of b": {want: []model.GPUHolder{holders["b"], inUse}, hidden: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			user := map[string]string{"admin": "admin", "member of a": "ann", "viewer of a": "cal", "member of b": "bob"}[name]
			r := e.do(t, req{Method: "GET", Path: "/v1/nodes", Token: tokens[user]})
			if r.Status != http.StatusOK {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			var nl api.NodeList
			if err := json.Unmarshal(r.Body, &nl); err != nil {
				t.Fatal(err)
			}
			if len(nl.Nodes) != 1 {
				t.Fatalf("%d nodes, want 1", len(nl.Nodes))
			}
			n := nl.Nodes[0]
			var got []model.GPUHolder
			for g, h := range n.Holders {
				got = append(got, h)
				if want := cmp.Or(h.AttemptID, model.HolderInUse); n.GPUHolders[g] != want {
					t.Errorf("gpuHolders[%d] = %q, want %q", g, n.GPUHolders[g], want)
				}
			}
			order := func(a, b model.GPUHolder) int {
				return strings.Compare(a.Project+a.AttemptID, b.Project+b.AttemptID)
			}
			slices.SortFunc(got, order)
			want := slices.Clone(tt.want)
			slices.SortFunc(want, order)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("holders (-want +got):\n%s", diff)
			}
			if h, ok := holders[tt.hidden]; ok {
				for _, leak := range []string{h.JobID, h.AttemptID, `"user":"` + h.User + `"`, `"project":"` + h.Project + `"`} {
					if strings.Contains(string(r.Body), leak) {
						t.Errorf("the answer names another tenant's attempt: it holds %s", leak)
					}
				}
			}
		})
	}
}
