package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// openAPIDoc is the part of the served OpenAPI document these tests read.
type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
}

type openAPIOperation struct {
	OperationID string                `json:"operationId"`
	Permission  string                `json:"x-gpufleet-permission"`
	Security    []map[string][]string `json:"security"`
	Responses   map[string]any        `json:"responses"`
	Parameters  []struct {
		Name     string `json:"name"`
		In       string `json:"in"`
		Required bool   `json:"required"`
	} `json:"parameters"`
}

// fetchOpenAPI reads the document as a client does, over HTTP.
func fetchOpenAPI(t *testing.T, e *testEnv) openAPIDoc {
	t.Helper()
	r := e.do(t, req{Method: "GET", Path: "/v1/openapi.json", Token: e.admin})
	if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	var doc openAPIDoc
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatalf("decoding OpenAPI document: %v", err)
	}
	return doc
}

// operations lists a document's operations as "METHOD pattern", sorted.
func operations(doc openAPIDoc) []string {
	var out []string
	for path, ops := range doc.Paths {
		for method := range ops {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

var pathParamRE = regexp.MustCompile(`\{([^}]+)\}`)

// concrete fills a pattern's path parameters.
func concrete(pattern string) string {
	return pathParamRE.ReplaceAllString(pattern, "x")
}

// declaration is what a route declares about access.
type declaration struct {
	Perm   api.Permission
	Kinds  []model.TokenKind
	Public bool
}

// TestRouteDeclarations pins every route's access declaration. A route added
// to the table fails here until its permission and token kinds are written
// down, and reviewed, below.
func TestRouteDeclarations(t *testing.T) {
	t.Parallel()
	users := []model.TokenKind{model.TokenUser}
	usersJobs := []model.TokenKind{model.TokenUser, model.TokenJob}
	all := []model.TokenKind{model.TokenUser, model.TokenAgent, model.TokenJob}
	agents := []model.TokenKind{model.TokenAgent}
	want := map[string]declaration{
		"GET /healthz":                                       {Public: true},
		"GET /readyz":                                        {Public: true},
		"GET /metrics":                                       {Perm: api.PermMetricsRead, Kinds: users},
		"GET /v1/openapi.json":                               {Perm: api.PermAPIRead, Kinds: all},
		"GET /v1/version":                                    {Perm: api.PermAPIRead, Kinds: all},
		"POST /v1/jobs":                                      {Perm: api.PermJobsSubmit, Kinds: users},
		"GET /v1/jobs":                                       {Perm: api.PermJobsRead, Kinds: users},
		"GET /v1/jobs/{id}":                                  {Perm: api.PermJobsRead, Kinds: usersJobs},
		"POST /v1/jobs/{id}/cancel":                          {Perm: api.PermJobsCancel, Kinds: users},
		"POST /v1/jobs/{id}/checkpoints":                     {Perm: api.PermJobsCheckpoint, Kinds: usersJobs},
		"POST /v1/jobs/{id}/metrics":                         {Perm: api.PermJobsMetrics, Kinds: usersJobs},
		"GET /v1/cost":                                       {Perm: api.PermCostReport, Kinds: users},
		"GET /v1/cost/forecast":                              {Perm: api.PermCostRead, Kinds: users},
		"GET /v1/cost/purchase":                              {Perm: api.PermCostRead, Kinds: users},
		"GET /v1/budgets":                                    {Perm: api.PermCostRead, Kinds: users},
		"GET /v1/budgets/{name}":                             {Perm: api.PermCostRead, Kinds: users},
		"GET /v1/jobs/{id}/logs":                             {Perm: api.PermJobsRead, Kinds: usersJobs},
		"GET /v1/nodes":                                      {Perm: api.PermNodesRead, Kinds: users},
		"GET /v1/offers":                                     {Perm: api.PermOffersRead, Kinds: users},
		"GET /v1/offers/unavailable":                         {Perm: api.PermOffersRead, Kinds: users},
		"POST /v1/advise":                                    {Perm: api.PermOffersRead, Kinds: users},
		"POST /v1/tokens":                                    {Perm: api.PermTokensManage, Kinds: users},
		"POST /v1/tokens/rotate":                             {Perm: api.PermTokensRotate, Kinds: users},
		"GET /v1/projects":                                   {Perm: api.PermProjectsRead, Kinds: users},
		"GET /v1/projects/{project}/secrets":                 {Perm: api.PermSecretsManage, Kinds: users},
		"PUT /v1/projects/{project}/secrets/{name}":          {Perm: api.PermSecretsManage, Kinds: users},
		"DELETE /v1/projects/{project}/secrets/{name}":       {Perm: api.PermSecretsManage, Kinds: users},
		"POST /v1/secrets/reseal":                            {Perm: api.PermSecretsReseal, Kinds: users},
		"GET /v1/grants":                                     {Perm: api.PermUsersManage, Kinds: users},
		"PUT /v1/grants":                                     {Perm: api.PermUsersManage, Kinds: users},
		"DELETE /v1/grants/{user}/{project}":                 {Perm: api.PermUsersManage, Kinds: users},
		"GET /v1/audit":                                      {Perm: api.PermAuditRead, Kinds: users},
		"GET /v1/tokens":                                     {Perm: api.PermTokensManage, Kinds: users},
		"DELETE /v1/tokens/{id}":                             {Perm: api.PermTokensManage, Kinds: users},
		"GET /v1/jobs/{id}/explain":                          {Perm: api.PermJobsRead, Kinds: usersJobs},
		"GET /v1/queues":                                     {Perm: api.PermQueuesRead, Kinds: users},
		"GET /v1/queues/{name}":                              {Perm: api.PermQueuesRead, Kinds: users},
		"PUT /v1/queues/{name}":                              {Perm: api.PermQueuesManage, Kinds: users},
		"DELETE /v1/queues/{name}":                           {Perm: api.PermQueuesManage, Kinds: users},
		"POST /v1/services":                                  {Perm: api.PermJobsSubmit, Kinds: users},
		"GET /v1/services":                                   {Perm: api.PermJobsRead, Kinds: users},
		"GET /v1/services/{name}":                            {Perm: api.PermJobsRead, Kinds: users},
		"DELETE /v1/services/{name}":                         {Perm: api.PermJobsCancel, Kinds: users},
		"POST /v1/plan":                                      {Perm: api.PermFleetRead, Kinds: users},
		"POST /v1/apply":                                     {Perm: api.PermFleetManage, Kinds: users},
		"GET /v1/revisions":                                  {Perm: api.PermFleetRead, Kinds: users},
		"GET /v1/revisions/{number}":                         {Perm: api.PermFleetRead, Kinds: users},
		"POST /v1/rollback":                                  {Perm: api.PermFleetManage, Kinds: users},
		"GET /v1/drift":                                      {Perm: api.PermFleetRead, Kinds: users},
		"GET /v1/gitops":                                     {Perm: api.PermFleetRead, Kinds: users},
		"GET /v1/events":                                     {Perm: api.PermNodesRead, Kinds: users},
		"POST /v1/nodes/{id}/interrupt":                      {Perm: api.PermFleetManage, Kinds: users},
		"POST /v1/archives":                                  {Perm: api.PermJobsSubmit, Kinds: users},
		"GET /v1/artifacts":                                  {Perm: api.PermArtifactsRead, Kinds: users},
		"GET /v1/artifacts/{project}/checkpoints/{job}":      {Perm: api.PermArtifactsRead, Kinds: users},
		"GET /v1/artifacts/{project}/checkpoints/{job}/file": {Perm: api.PermArtifactsRead, Kinds: users},
		"DELETE /v1/artifacts/{project}/checkpoints/{job}/steps/{step}": {Perm: api.PermArtifactsDelete, Kinds: users},
		"GET /v1/artifacts/{project}/models/{name}":                     {Perm: api.PermArtifactsRead, Kinds: users},
		"GET /v1/artifacts/{project}/models/{name}/file":                {Perm: api.PermArtifactsRead, Kinds: users},
		"PUT /v1/artifacts/{project}/models/{name}/objects/{digest}":    {Perm: api.PermArtifactsPush, Kinds: users},
		"POST /v1/artifacts/{project}/models/{name}":                    {Perm: api.PermArtifactsPush, Kinds: users},
		"DELETE /v1/artifacts/{project}/models/{name}":                  {Perm: api.PermArtifactsDelete, Kinds: users},
		"GET /v1/alerts":              {Perm: api.PermNodesRead, Kinds: users},
		"GET /v1/archives/{digest}":   {Perm: api.PermAgent, Kinds: agents},
		"POST /v1/agent/join":         {Perm: api.PermAgentJoin, Kinds: []model.TokenKind{model.TokenJoin}},
		"POST /v1/agent/register":     {Perm: api.PermAgent, Kinds: agents},
		"POST /v1/agent/sync":         {Perm: api.PermAgent, Kinds: agents},
		"POST /v1/agent/logs":         {Perm: api.PermAgent, Kinds: agents},
		"GET /v1/jobs/{id}/telemetry": {Perm: api.PermJobsRead, Kinds: usersJobs},
		// A separate proxy's token holds these and nothing else.
		"GET /v1/proxy/endpoints":  {Perm: api.PermServicesProxy, Kinds: []model.TokenKind{model.TokenProxy}},
		"POST /v1/proxy/load":      {Perm: api.PermServicesProxy, Kinds: []model.TokenKind{model.TokenProxy}},
		"POST /v1/proxy/authorize": {Perm: api.PermServicesProxy, Kinds: []model.TokenKind{model.TokenProxy}},
	}
	got := map[string]declaration{}
	for _, rt := range api.Routes() {
		key := rt.Method + " " + rt.Pattern
		if _, dup := got[key]; dup {
			t.Errorf("route %s is declared twice", key)
		}
		got[key] = declaration{Perm: rt.Perm, Kinds: rt.Kinds, Public: rt.Public}
		switch {
		case rt.Public && (rt.Perm != "" || len(rt.Kinds) > 0):
			t.Errorf("public route %s also declares a permission or token kinds", key)
		case !rt.Public && (rt.Perm == "" || len(rt.Kinds) == 0):
			t.Errorf("route %s is not public but declares no permission or no token kinds", key)
		}
		if rt.Summary == "" || rt.Status == 0 {
			t.Errorf("route %s has no summary or no success status for its documentation", key)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("route declarations (-want +got):\n%s", diff)
	}
}

// TestOpenAPIMatchesRoutes checks the served document against the table:
// the same operations, each path parameter documented, and the security
// each route needs.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	doc := fetchOpenAPI(t, e)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	var want []string
	for _, rt := range api.Routes() {
		want = append(want, rt.Method+" "+rt.Pattern)
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, operations(doc)); diff != "" {
		t.Errorf("operations in the OpenAPI document (-want +got):\n%s", diff)
	}
	ids := map[string]string{}
	for _, rt := range api.Routes() {
		op, ok := doc.Paths[rt.Pattern][strings.ToLower(rt.Method)]
		if !ok {
			continue // reported above
		}
		key := rt.Method + " " + rt.Pattern
		t.Run(key, func(t *testing.T) {
			if prev, dup := ids[op.OperationID]; dup || op.OperationID == "" {
				t.Errorf("operationId %q is empty or also used by %s", op.OperationID, prev)
			}
			ids[op.OperationID] = key
			var wantParams, gotParams []string
			for _, m := range pathParamRE.FindAllStringSubmatch(rt.Pattern, -1) {
				wantParams = append(wantParams, m[1])
			}
			for _, p := range op.Parameters {
				if p.In != "path" {
					continue
				}
				if !p.Required {
					t.Errorf("path parameter %s is not marked required", p.Name)
				}
				gotParams = append(gotParams, p.Name)
			}
			if diff := cmp.Diff(wantParams, gotParams); diff != "" {
				t.Errorf("documented path parameters (-want +got):\n%s", diff)
			}
			if op.Permission != string(rt.Perm) {
				t.Errorf("x-gpufleet-permission = %q, want %q", op.Permission, rt.Perm)
			}
			wantSecurity := []map[string][]string{{"bearer": {}}}
			if rt.Public {
				wantSecurity = []map[string][]string{}
			}
			if diff := cmp.Diff(wantSecurity, op.Security); diff != "" {
				t.Errorf("security (-want +got):\n%s", diff)
			}
			if _, ok := op.Responses["401"]; ok == rt.Public {
				t.Errorf("401 documented: %v, want %v", ok, !rt.Public)
			}
		})
	}
}

// TestEveryRouteIsProtected sends every operation of the served OpenAPI
// document without a valid token: all but the health checks must answer
// 401 with a problem and a WWW-Authenticate challenge.
func TestEveryRouteIsProtected(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	e := newEnv(t, envConfig{Clock: clk})
	ctx := context.Background()
	doc := fetchOpenAPI(t, e)

	_, expired := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "eve", Admin: true, TTL: time.Minute})
	revokedID, revoked := e.token(t, model.TokenRequest{Kind: model.TokenUser, Subject: "mallory", Admin: true})
	if err := e.ctrl.Identity().RevokeToken(ctx, revokedID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // the admin token has an hour

	credentials := map[string]map[string]string{
		"no Authorization":    nil,
		"empty bearer":        {"Authorization": "Bearer "},
		"basic scheme":        {"Authorization": "Basic YWRtaW46YWRtaW4="},
		"unknown token":       {"Authorization": "Bearer gfu_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		"expired token":       {"Authorization": "Bearer " + expired},
		"revoked token":       {"Authorization": "Bearer " + revoked},
		"admin token as text": {"Authorization": e.admin}, // no scheme
	}
	public := map[string]bool{"GET /healthz": true, "GET /readyz": true}
	ops := operations(doc)
	if len(ops) == 0 {
		t.Fatal("the OpenAPI document has no operations")
	}
	for _, op := range ops {
		method, pattern, _ := strings.Cut(op, " ")
		for name, hdr := range credentials {
			t.Run(op+"/"+name, func(t *testing.T) {
				t.Parallel()
				r := e.do(t, req{Method: method, Path: concrete(pattern), Header: hdr})
				if public[op] {
					if r.Status != http.StatusOK {
						t.Errorf("status = %d, want 200 (public); body %s", r.Status, r.Body)
					}
					return
				}
				if r.Status != http.StatusUnauthorized {
					t.Fatalf("status = %d, want 401; body %s", r.Status, r.Body)
				}
				p := problem(t, r)
				if p.Instance != concrete(pattern) {
					t.Errorf("problem instance = %q, want %q", p.Instance, concrete(pattern))
				}
				if got := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
				}
			})
		}
	}
	for op := range public {
		if !contains(ops, op) {
			t.Errorf("public route %s is missing from the OpenAPI document", op)
		}
	}
}

// TestUndeclaredRoutesAreNotServed: with a valid admin token, anything not
// in the table gets a 404 problem, never a handler.
func TestUndeclaredRoutesAreNotServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	tests := map[string]req{
		"unknown path":                 {Method: "GET", Path: "/v1/nope"},
		"unknown subresource":          {Method: "GET", Path: "/v1/jobs/x/nope"},
		"trailing slash":               {Method: "GET", Path: "/v1/jobs/"},
		"unversioned":                  {Method: "GET", Path: "/jobs"},
		"root":                         {Method: "GET", Path: "/"},
		"agent protocol, unknown verb": {Method: "POST", Path: "/v1/agent/nope"},
		"undeclared method on jobs":    {Method: "DELETE", Path: "/v1/jobs"},
		"undeclared method on a job":   {Method: "PUT", Path: "/v1/jobs/x"},
		"undeclared method on tokens":  {Method: "PATCH", Path: "/v1/tokens/x"},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.Token = e.admin
			got := e.do(t, r)
			if got.Status != http.StatusNotFound {
				t.Fatalf("status = %d, want 404; body %s", got.Status, got.Body)
			}
			if p := problem(t, got); p.Instance != r.Path {
				t.Errorf("problem instance = %q, want %q", p.Instance, r.Path)
			}
		})
	}
}

// TestHealth: the health checks answer without a token, and readiness
// reports why the server cannot take writes.
func TestHealth(t *testing.T) {
	t.Parallel()
	var ready atomic.Pointer[error]
	e := newEnv(t, envConfig{Ready: func() error {
		if err := ready.Load(); err != nil {
			return *err
		}
		return nil
	}})
	type result struct {
		Status      int
		ContentType string
		Body        string
	}
	get := func(path string) result {
		r := e.do(t, req{Method: "GET", Path: path})
		if r.Status != http.StatusOK {
			return result{r.Status, r.Header.Get("Content-Type"), problem(t, r).Detail}
		}
		return result{r.Status, r.Header.Get("Content-Type"), string(r.Body)}
	}
	if diff := cmp.Diff(result{200, "text/plain", "ok\n"}, get("/healthz")); diff != "" {
		t.Errorf("healthz (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(result{200, "text/plain", "ready\n"}, get("/readyz")); diff != "" {
		t.Errorf("readyz when ready (-want +got):\n%s", diff)
	}
	notReady := errors.New("store is closed")
	ready.Store(&notReady)
	if diff := cmp.Diff(result{503, api.ProblemContentType, "store is closed"}, get("/readyz")); diff != "" {
		t.Errorf("readyz when not ready (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(result{200, "text/plain", "ok\n"}, get("/healthz")); diff != "" {
		t.Errorf("healthz when not ready (-want +got):\n%s", diff)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
