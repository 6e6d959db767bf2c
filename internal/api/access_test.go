package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cmp"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// grant gives user role in project through the controller.
func (e *testEnv) grant(tb testing.TB, user, project string, role model.Role) {
	tb.Helper()
	if _, err := e.ctrl.Identity().Grant(context.Background(), model.Grant{User: user, Project: project, Role: role}); err != nil {
		tb.Fatalf("granting %s %s in %s: %v", user, role, project, err)
	}
}

// projectJob is a valid job manifest in project.
func projectJob(name, project string) []byte {
	return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job",
  "metadata": {"name": "` + name + `", "project": "` + project + `"},
  "spec": {"resources": {"gpus": 1, "gpu": {"models": ["H100"]}}, "run": {"command": ["true"]}}}`)
}

// accessCase is how the route×role×project test calls one route: the
// request aimed at the caller's own project "a", and, for routes that act
// on one project, the same request aimed at project "b".
type accessCase struct {
	// project: where the route finds its project ("" when it acts on
	// none); pinned here so a change to the table is reviewed.
	project string
	// min is the least role that may call it ("" any user, admin a global
	// admin, "agent" agent tokens only).
	min   model.Role
	build func(f *accessFixture, project string) req
}

// accessFixture holds the objects of both projects.
type accessFixture struct {
	jobs map[string]string // project → job id
}

func (f *accessFixture) job(project string) string { return f.jobs[project] }

func get(path string) func(*accessFixture, string) req {
	return func(*accessFixture, string) req { return req{Method: "GET", Path: path} }
}

func send(method, path, body string) func(*accessFixture, string) req {
	return func(*accessFixture, string) req { return req{Method: method, Path: path, Body: []byte(body)} }
}

func onJob(method, suffix string) func(*accessFixture, string) req {
	return func(f *accessFixture, p string) req {
		return req{Method: method, Path: "/v1/jobs/" + f.job(p) + suffix}
	}
}

const agentOnly model.Role = "agent"

// proxyOnly marks the routes of a separate proxy's token.
const proxyOnly model.Role = "proxy"

// accessCases declares every route for TestAccessMatrix. A route missing
// here fails the test: declare it, with the least role that may call it.
var accessCases = map[string]accessCase{
	"GET /healthz":         {build: get("/healthz")},
	"GET /readyz":          {build: get("/readyz")},
	"GET /metrics":         {min: model.RoleAdmin, build: get("/metrics")},
	"GET /v1/openapi.json": {build: get("/v1/openapi.json")},
	"GET /v1/version":      {build: get("/v1/version")},
	"POST /v1/jobs": {project: "body", min: model.RoleMember, build: func(_ *accessFixture, p string) req {
		return req{Method: "POST", Path: "/v1/jobs", Body: projectJob("new", p)}
	}},
	"GET /v1/jobs":                   {project: "query", min: model.RoleViewer, build: func(_ *accessFixture, p string) req { return req{Method: "GET", Path: "/v1/jobs?project=" + p} }},
	"GET /v1/jobs/{id}":              {project: "job", min: model.RoleViewer, build: onJob("GET", "")},
	"POST /v1/jobs/{id}/cancel":      {project: "job", min: model.RoleMember, build: onJob("POST", "/cancel")},
	"POST /v1/jobs/{id}/checkpoints": {project: "job", min: model.RoleMember, build: onJob("POST", "/checkpoints")},
	"GET /v1/jobs/{id}/logs":         {project: "job", min: model.RoleViewer, build: onJob("GET", "/logs")},
	"GET /v1/jobs/{id}/explain":      {project: "job", min: model.RoleViewer, build: onJob("GET", "/explain")},
	"GET /v1/jobs/{id}/telemetry":    {project: "job", min: model.RoleViewer, build: onJob("GET", "/telemetry")},
	"GET /v1/queues":                 {min: model.RoleViewer, build: get("/v1/queues")},
	"POST /v1/services": {project: "body", min: model.RoleMember, build: func(_ *accessFixture, p string) req {
		return req{Method: "POST", Path: "/v1/services", Body: projectService("new-"+p, p, "token")}
	}},
	"GET /v1/services":                   {project: "query", min: model.RoleViewer, build: func(_ *accessFixture, p string) req { return req{Method: "GET", Path: "/v1/services?project=" + p} }},
	"GET /v1/services/{name}":            {min: model.RoleViewer, build: get("/v1/services/svc-a")},
	"DELETE /v1/services/{name}":         {min: model.RoleMember, build: send("DELETE", "/v1/services/x", "")},
	"POST /v1/jobs/{id}/metrics":         {project: "job", min: model.RoleMember, build: onJob("POST", "/metrics")},
	"GET /v1/cost":                       {min: model.RoleViewer, build: get("/v1/cost")},
	"GET /v1/cost/forecast":              {min: model.RoleAdmin, build: get("/v1/cost/forecast")},
	"GET /v1/cost/purchase":              {min: model.RoleAdmin, build: get("/v1/cost/purchase")},
	"GET /v1/budgets":                    {min: model.RoleAdmin, build: get("/v1/budgets")},
	"GET /v1/budgets/{name}":             {min: model.RoleAdmin, build: get("/v1/budgets/x")},
	"GET /v1/queues/{name}":              {min: model.RoleViewer, build: get("/v1/queues/default")},
	"PUT /v1/queues/{name}":              {min: model.RoleAdmin, build: send("PUT", "/v1/queues/x", `{"apiVersion": "gpufleet.dev/v1", "kind": "Queue", "metadata": {"name": "x"}, "spec": {}}`)},
	"DELETE /v1/queues/{name}":           {min: model.RoleAdmin, build: send("DELETE", "/v1/queues/x", "")},
	"POST /v1/plan":                      {min: model.RoleViewer, build: send("POST", "/v1/plan", `{"documents": []}`)},
	"POST /v1/apply":                     {min: model.RoleAdmin, build: send("POST", "/v1/apply", `{"documents": [], "baseRevision": 99}`)},
	"GET /v1/revisions":                  {min: model.RoleViewer, build: get("/v1/revisions")},
	"GET /v1/revisions/{number}":         {min: model.RoleViewer, build: get("/v1/revisions/1")},
	"POST /v1/rollback":                  {min: model.RoleAdmin, build: send("POST", "/v1/rollback", `{"to": 99}`)},
	"GET /v1/drift":                      {min: model.RoleViewer, build: get("/v1/drift")},
	"GET /v1/gitops":                     {min: model.RoleViewer, build: get("/v1/gitops")},
	"GET /v1/nodes":                      {min: model.RoleViewer, build: get("/v1/nodes")},
	"GET /v1/alerts":                     {min: model.RoleViewer, build: get("/v1/alerts")},
	"GET /v1/events":                     {min: model.RoleViewer, build: get("/v1/events")},
	"POST /v1/nodes/{id}/interrupt":      {min: model.RoleAdmin, build: send("POST", "/v1/nodes/no-such-node/interrupt", ``)},
	"GET /v1/offers":                     {min: model.RoleViewer, build: get("/v1/offers?limit=1")},
	"GET /v1/offers/unavailable":         {min: model.RoleViewer, build: get("/v1/offers/unavailable")},
	"POST /v1/advise":                    {min: model.RoleViewer, build: send("POST", "/v1/advise", `{}`)},
	"GET /v1/projects":                   {min: model.RoleViewer, build: get("/v1/projects")},
	"GET /v1/grants":                     {min: model.RoleAdmin, build: get("/v1/grants")},
	"PUT /v1/grants":                     {min: model.RoleAdmin, build: send("PUT", "/v1/grants", `{"user": "zed", "project": "c", "role": "viewer"}`)},
	"DELETE /v1/grants/{user}/{project}": {min: model.RoleAdmin, build: send("DELETE", "/v1/grants/zed/c", "")},
	"GET /v1/audit":                      {min: model.RoleAdmin, build: get("/v1/audit?limit=1")},
	"POST /v1/tokens/rotate":             {build: send("POST", "/v1/tokens/rotate", "")},
	"POST /v1/tokens":                    {min: model.RoleAdmin, build: send("POST", "/v1/tokens", `{"kind": "user", "subject": "zed", "ttl": "1h"}`)},
	"GET /v1/tokens":                     {min: model.RoleAdmin, build: get("/v1/tokens")},
	"DELETE /v1/tokens/{id}":             {min: model.RoleAdmin, build: send("DELETE", "/v1/tokens/tok-nosuch", "")},
	"POST /v1/archives": {project: "query", min: model.RoleMember, build: func(_ *accessFixture, p string) req {
		return req{Method: "POST", Path: "/v1/archives?project=" + p, Body: []byte("not a tarball")}
	}},
	"GET /v1/archives/{digest}": {min: agentOnly, build: get("/v1/archives/sha256:" + strings.Repeat("0", 64))},
	"POST /v1/agent/join":       {min: agentOnly, build: send("POST", "/v1/agent/join", `{"instanceId": "i-0123456789abcdef0"}`)},
	"POST /v1/agent/register":   {min: agentOnly, build: send("POST", "/v1/agent/register", `{}`)},
	"POST /v1/agent/sync":       {min: agentOnly, build: send("POST", "/v1/agent/sync", `{"nodeId": "node-q"}`)},
	"GET /v1/projects/{project}/secrets": {project: "path", min: model.RoleProjectAdmin, build: func(_ *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/projects/" + p + "/secrets"}
	}},
	"PUT /v1/projects/{project}/secrets/{name}": {project: "path", min: model.RoleProjectAdmin, build: func(_ *accessFixture, p string) req {
		return req{Method: "PUT", Path: "/v1/projects/" + p + "/secrets/X", Body: []byte(`{"value": "v"}`)}
	}},
	"DELETE /v1/projects/{project}/secrets/{name}": {project: "path", min: model.RoleProjectAdmin, build: func(_ *accessFixture, p string) req {
		return req{Method: "DELETE", Path: "/v1/projects/" + p + "/secrets/NOPE"}
	}},
	"POST /v1/secrets/reseal": {min: model.RoleAdmin, build: send("POST", "/v1/secrets/reseal", "")},
	"GET /v1/artifacts": {project: "query", min: model.RoleViewer, build: func(_ *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/artifacts?project=" + p}
	}},
	"GET /v1/artifacts/{project}/checkpoints/{job}": {project: "path", min: model.RoleViewer, build: func(f *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/artifacts/" + p + "/checkpoints/" + f.job(p)}
	}},
	"GET /v1/artifacts/{project}/checkpoints/{job}/file": {project: "path", min: model.RoleViewer, build: func(f *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/artifacts/" + p + "/checkpoints/" + f.job(p) + "/file?path=a"}
	}},
	"DELETE /v1/artifacts/{project}/checkpoints/{job}/steps/{step}": {project: "path", min: model.RoleProjectAdmin, build: func(f *accessFixture, p string) req {
		return req{Method: "DELETE", Path: "/v1/artifacts/" + p + "/checkpoints/" + f.job(p) + "/steps/1"}
	}},
	"GET /v1/artifacts/{project}/models/{name}": {project: "path", min: model.RoleViewer, build: func(_ *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/artifacts/" + p + "/models/m"}
	}},
	"GET /v1/artifacts/{project}/models/{name}/file": {project: "path", min: model.RoleViewer, build: func(_ *accessFixture, p string) req {
		return req{Method: "GET", Path: "/v1/artifacts/" + p + "/models/m/file?path=a"}
	}},
	"PUT /v1/artifacts/{project}/models/{name}/objects/{digest}": {project: "path", min: model.RoleMember, build: func(_ *accessFixture, p string) req {
		return req{Method: "PUT", Path: "/v1/artifacts/" + p + "/models/m/objects/" + strings.Repeat("0", 64), Body: []byte("x")}
	}},
	"POST /v1/artifacts/{project}/models/{name}": {project: "path", min: model.RoleMember, build: func(_ *accessFixture, p string) req {
		return req{Method: "POST", Path: "/v1/artifacts/" + p + "/models/m", Body: []byte(`{"files": []}`)}
	}},
	"DELETE /v1/artifacts/{project}/models/{name}": {project: "path", min: model.RoleProjectAdmin, build: func(_ *accessFixture, p string) req {
		return req{Method: "DELETE", Path: "/v1/artifacts/" + p + "/models/m?all=true"}
	}},
	"POST /v1/agent/logs":     {min: agentOnly, build: send("POST", "/v1/agent/logs", `{"nodeId": "node-q"}`)},
	"GET /v1/proxy/endpoints": {min: proxyOnly, build: get("/v1/proxy/endpoints?after=0")},
	"POST /v1/proxy/load":     {min: proxyOnly, build: send("POST", "/v1/proxy/load", `{"services": {"svc-a": {"inFlight": 1}}}`)},
	"POST /v1/proxy/authorize": {min: proxyOnly, build: send("POST", "/v1/proxy/authorize",
		`{"service": "svc-a", "digest": "`+strings.Repeat("0", 64)+`"}`)},
}

// TestAccessMatrix calls every route as every role, on the caller's own
// project and on another, and checks the answer is a refusal (403) exactly
// when the role may not: the allow-list of DESIGN.md §6. Anonymous callers
// are TestEveryRouteIsProtected's.
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	f := &accessFixture{jobs: map[string]string{"a": e.submit(t, projectJob("ja", "a")), "b": e.submit(t, projectJob("jb", "b"))}}
	if r := e.do(t, req{Method: "POST", Path: "/v1/services", Body: projectService("svc-a", "a", "token"), Token: e.admin}); r.Status != http.StatusCreated {
		t.Fatalf("applying svc-a: %d %s", r.Status, r.Body)
	}

	// Every role holds it in project a only; a user granted nothing is
	// "nobody". Each call gets a fresh token, so that rotating one (or
	// revoking it) never disturbs another.
	type caller struct {
		role  model.Role // "" for nobody, agentOnly for an agent token
		token func() string
	}
	userToken := func(subject string, admin bool) func() string {
		return func() string {
			_, s := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: subject, Admin: admin})
			return s
		}
	}
	for _, r := range []model.Role{model.RoleViewer, model.RoleMember, model.RoleProjectAdmin} {
		e.grant(t, string(r), "a", r)
	}
	e.grant(t, "global", model.AllProjects, model.RoleAdmin)
	callers := map[string]caller{
		"admin token":   {model.RoleAdmin, userToken("root", true)},
		"admin grant":   {model.RoleAdmin, userToken("global", false)},
		"project-admin": {model.RoleProjectAdmin, userToken("project-admin", false)},
		"member":        {model.RoleMember, userToken("member", false)},
		"viewer":        {model.RoleViewer, userToken("viewer", false)},
		"nobody":        {"", userToken("nobody", false)},
		"agent": {agentOnly, func() string {
			_, s := e.token(t, model.TokenRequest{Kind: model.TokenAgent, Subject: "node-q"})
			return s
		}},
		// A separate proxy's token: its three routes and nothing else.
		"proxy": {proxyOnly, func() string {
			_, s := e.token(t, model.TokenRequest{Kind: model.TokenProxy, Subject: "edge-1"})
			return s
		}},
	}
	allowed := func(c caller, ac accessCase, rt api.Route, project string) bool {
		switch {
		case c.role == agentOnly:
			return slices.Contains(rt.Kinds, model.TokenAgent)
		case c.role == proxyOnly:
			return slices.Contains(rt.Kinds, model.TokenProxy)
		case ac.min == agentOnly || ac.min == proxyOnly:
			return false
		case c.role == model.RoleAdmin || ac.min == "":
			return true
		case ac.min == model.RoleAdmin || project == "b":
			return false
		}
		return c.role.Rank() >= ac.min.Rank()
	}

	declared := map[string]bool{}
	for _, rt := range api.Routes() {
		key := rt.Method + " " + rt.Pattern
		declared[key] = true
		ac, ok := accessCases[key]
		if !ok {
			t.Errorf("route %s has no entry in accessCases: declare who may call it", key)
			continue
		}
		if rt.Public {
			continue // anyone, with or without a token
		}
		if got := api.MinRole[rt.Perm]; got != ac.min && !(ac.min == agentOnly && (rt.Perm == api.PermAgent || rt.Perm == api.PermAgentJoin)) &&
			!(ac.min == proxyOnly && rt.Perm == api.PermServicesProxy) {
			t.Errorf("route %s: permission %s needs role %q, the test declares %q", key, rt.Perm, got, ac.min)
		}
		if got := api.RouteProject(rt); got != cmp.Or(ac.project, "none") {
			t.Errorf("route %s: project from %q, the test declares %q", key, got, cmp.Or(ac.project, "none"))
		}
		projects := []string{"a"}
		if ac.project != "" {
			projects = append(projects, "b")
		}
		for name, c := range callers {
			for _, p := range projects {
				t.Run(key+"/"+name+"/"+p, func(t *testing.T) {
					r := ac.build(f, p)
					r.Token = c.token()
					got := e.do(t, r)
					want := allowed(c, ac, rt, p)
					denied := got.Status == http.StatusForbidden || got.Status == http.StatusUnauthorized
					if want == denied {
						t.Errorf("status %d (allowed: %v, want allowed: %v); body %s", got.Status, !denied, want, got.Body)
					}
				})
			}
		}
	}
	for key := range accessCases {
		if !declared[key] {
			t.Errorf("accessCases declares %s, which is not a route", key)
		}
	}
}

// TestListsShowOnlyOwnProjects: listing jobs without a project shows only
// the projects the caller holds a role in.
func TestListsShowOnlyOwnProjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	ja := e.submit(t, projectJob("ja", "a"))
	jb := e.submit(t, projectJob("jb", "b"))
	e.grant(t, "ann", "a", model.RoleViewer)
	_, ann := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "ann"})
	ids := func(token string) []string {
		var out []string
		for _, j := range e.listJobs(t, token, "") {
			out = append(out, j.ID)
		}
		return out
	}
	if diff := gocmp.Diff([]string{ja}, ids(ann)); diff != "" {
		t.Errorf("ann's jobs (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff([]string{jb, ja}, ids(e.admin)); diff != "" {
		t.Errorf("admin's jobs (-want +got):\n%s", diff)
	}
	r := e.do(t, req{Method: "GET", Path: "/v1/projects", Token: ann})
	var pl api.ProjectList
	if err := json.Unmarshal(r.Body, &pl); err != nil {
		t.Fatalf("decoding %s: %v", r.Body, err)
	}
	if diff := gocmp.Diff([]api.ProjectView{{Name: "a", Role: model.RoleViewer}}, pl.Projects); diff != "" {
		t.Errorf("ann's projects (-want +got):\n%s", diff)
	}
}

// TestNewUserHoldsNothing: a user token without grants may read the API
// document and nothing else, and gains exactly what a grant gives.
func TestNewUserHoldsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	_, bo := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "bo", TTL: time.Hour})
	status := func(r req) int { r.Token = bo; return e.do(t, r).Status }
	if got := status(req{Method: "GET", Path: "/v1/version"}); got != http.StatusOK {
		t.Errorf("version: %d, want 200", got)
	}
	if got := status(req{Method: "POST", Path: "/v1/jobs", Body: projectJob("x", "a")}); got != http.StatusForbidden {
		t.Errorf("submit before a grant: %d, want 403", got)
	}
	e.grant(t, "bo", "a", model.RoleMember)
	if got := status(req{Method: "POST", Path: "/v1/jobs", Body: projectJob("x", "a")}); got != http.StatusCreated {
		t.Errorf("submit to a as a member of a: %d, want 201", got)
	}
	if got := status(req{Method: "POST", Path: "/v1/jobs", Body: projectJob("x", "b")}); got != http.StatusForbidden {
		t.Errorf("submit to b as a member of a: %d, want 403", got)
	}
}

// TestProjectPolicyAdmission: a project's declared policy refuses jobs that
// ask for more, with the field paths at fault.
func TestProjectPolicyAdmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	project := `{"apiVersion": "gpufleet.dev/v1", "kind": "Project", "metadata": {"name": "eu"},
		"spec": {"allowedRegions": ["eu-*"], "allowedGPUs": ["H100"], "maxGPUsPerJob": 4, "maxPricePerHour": 50}}`
	if r := e.do(t, req{Method: "POST", Path: "/v1/apply", Token: e.admin, Body: fleetBody(t, "", project)}); r.Status != http.StatusCreated {
		t.Fatalf("applying the project: %d %s", r.Status, r.Body)
	}
	job := func(spec string) []byte {
		return []byte(`{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": {"name": "p", "project": "eu"}, "spec": ` + spec + `}`)
	}
	tests := map[string]struct {
		spec  string
		paths []string // nil: admitted
	}{
		"within policy":     {spec: `{"resources": {"gpus": 2, "gpu": {"models": ["H100"]}}, "run": {"command": ["true"]}}`},
		"GPU not allowed":   {spec: `{"resources": {"gpus": 1, "gpu": {"models": ["A100"]}}, "run": {"command": ["true"]}}`, paths: []string{"spec.resources.gpu.models[0]"}},
		"too many GPUs":     {spec: `{"replicas": 3, "resources": {"gpus": 2, "gpu": {"models": ["H100"]}}, "run": {"command": ["true"]}}`, paths: []string{"spec.resources.gpus"}},
		"region outside":    {spec: `{"regions": {"allow": ["us-east-1"]}, "resources": {"gpus": 1, "gpu": {"models": ["H100"]}}, "run": {"command": ["true"]}}`, paths: []string{"spec.regions.allow[0]"}},
		"price above limit": {spec: `{"maxPricePerHour": 99, "resources": {"gpus": 1, "gpu": {"models": ["H100"]}}, "run": {"command": ["true"]}}`, paths: []string{"spec.maxPricePerHour"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Body: job(tc.spec)})
			if tc.paths == nil {
				if r.Status != http.StatusCreated {
					t.Fatalf("status %d, want 201: %s", r.Status, r.Body)
				}
				var v api.JobView
				if err := json.Unmarshal(r.Body, &v); err != nil {
					t.Fatal(err)
				}
				if diff := gocmp.Diff([]string{"eu-*"}, v.Spec.Regions.Allow); diff != "" {
					t.Errorf("inherited regions (-want +got):\n%s", diff)
				}
				return
			}
			if r.Status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.Status, r.Body)
			}
			if diff := gocmp.Diff(tc.paths, problemPaths(problem(t, r))); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}
