package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestExplainNamesNoOtherTenantsJob: a job that waits behind GPUs reserved
// for another project's job is told so without that job's id; an admin
// sees the id.
func TestExplainNamesNoOtherTenantsJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	agent := e.registerNode(t, 2)
	e.grant(t, "ann", "a", model.RoleMember)
	e.grant(t, "bob", "b", model.RoleMember)
	tokens := map[string]string{"admin": e.admin}
	for _, u := range []string{"ann", "bob"} {
		_, tokens[u] = e.token(t, controller.TokenRequest{Kind: model.TokenUser, Subject: u})
	}
	submit := func(user, project, spec string) string {
		t.Helper()
		body := `{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"project": "` + project + `"}, "spec": ` + spec + `}`
		r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: tokens[user], Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(body)})
		if r.Status != http.StatusCreated {
			t.Fatalf("%s submits: %d %s", user, r.Status, r.Body)
		}
		var v struct{ ID string }
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Fatal(err)
		}
		return v.ID
	}
	// ann's first job holds a GPU for an hour; bob's needs both, so both
	// are reserved for it from then; ann's second, without an estimate,
	// may not use the free one.
	submit("ann", "a", `{"resources": {"gpus": 1}, "run": {"command": ["true"]}, "limits": {"runtime": "1h"}}`)
	agent.waitReplicas(t, 1)
	bobs := submit("bob", "b", `{"resources": {"gpus": 2}, "run": {"command": ["true"]}, "limits": {"runtime": "1h"}}`)
	anns := submit("ann", "a", `{"resources": {"gpus": 1}, "run": {"command": ["true"]}}`)
	explain := func(user string) string {
		r := e.do(t, req{Method: "GET", Path: "/v1/jobs/" + anns + "/explain", Token: tokens[user]})
		if r.Status != http.StatusOK {
			t.Fatalf("explain as %s: %d %s", user, r.Status, r.Body)
		}
		return string(r.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(explain("admin"), "reserved for "+bobs) {
		if time.Now().After(deadline) {
			t.Fatalf("no reservation for bob's job in the admin's explain:\n%s", explain("admin"))
		}
		time.Sleep(20 * time.Millisecond) // the scheduling pass runs on its own goroutine; bounded
	}
	if got := explain("ann"); strings.Contains(got, bobs) || !strings.Contains(got, "reserved for another project's job") {
		t.Errorf("ann's explain names bob's job or hides the reservation:\n%s", got)
	}
}
