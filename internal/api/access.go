package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// projectFrom says where a route finds the project a request acts on, so
// that a user's role is checked in that project (DESIGN.md §6).
type projectFrom int

const (
	// projectNone: the route is not about one project. Admin permissions
	// need a global admin; others need the permission's role in some
	// project (a user granted nothing may call nothing but api.read).
	projectNone projectFrom = iota
	// projectOfJob: the project of the job (or array) named by {id}. A job
	// that does not exist is left to the handler's 404.
	projectOfJob
	// projectOfQuery: the ?project= parameter; without one, the handler
	// shows only the projects the caller holds the role in.
	projectOfQuery
	// projectOfBody: the project is in the body (metadata.project); the
	// middleware checks the role in some project and the handler calls
	// allowProject once it has parsed the body.
	projectOfBody
	// projectOfPath: the {project} path value.
	projectOfPath
)

// String names the resolution for tests and documentation.
func (p projectFrom) String() string {
	return [...]string{"none", "job", "query", "body", "path"}[p]
}

// MinRole is the least role a user token must hold, in the route's project,
// to use each permission. "" means any authenticated user; admin means a
// global admin. Agent and job tokens hold no roles: their kinds and scopes
// decide (Route.Kinds, Route.Scope).
var MinRole = map[Permission]model.Role{
	PermAPIRead:        "",
	PermTokensRotate:   "",
	PermJobsRead:       model.RoleViewer,
	PermNodesRead:      model.RoleViewer,
	PermOffersRead:     model.RoleViewer,
	PermQueuesRead:     model.RoleViewer,
	PermFleetRead:      model.RoleViewer,
	PermProjectsRead:   model.RoleViewer,
	PermJobsSubmit:     model.RoleMember,
	PermJobsCancel:     model.RoleMember,
	PermJobsCheckpoint: model.RoleMember,
	PermJobsMetrics:    model.RoleMember,
	// Cost reports and budgets span every project (the ledger is not yet
	// filtered by project), so only admins read them.
	PermCostRead:      model.RoleAdmin,
	PermCostReport:    model.RoleViewer,
	PermSecretsManage: model.RoleProjectAdmin,
	PermSecretsReseal: model.RoleAdmin,
	PermMetricsRead:   model.RoleAdmin,
	PermTokensManage:  model.RoleAdmin,
	// Held by proxy tokens only (Route.Kinds); no user token reaches it.
	PermServicesProxy: model.RoleAdmin,
	PermQueuesManage:  model.RoleAdmin,
	PermFleetManage:   model.RoleAdmin,
	PermUsersManage:   model.RoleAdmin,
	PermAuditRead:     model.RoleAdmin,
	PermAgent:         model.RoleAdmin, // never a user's: agents only
	PermAgentJoin:     model.RoleAdmin, // never a user's: join tokens only

	// Artefacts as jobs: viewers read, members push, project admins delete.
	PermArtifactsRead:   model.RoleViewer,
	PermArtifactsPush:   model.RoleMember,
	PermArtifactsDelete: model.RoleProjectAdmin,
}

// access is what authorisation learned about a request.
type access struct {
	tok     *model.Token
	route   Route
	project string
	reqID   string
	// recorded is set when the handler had its audit entry committed with
	// the change itself, so the middleware does not write a second one.
	recorded bool
}

type accessKey struct{}

func accessOf(r *http.Request) *access {
	a, _ := r.Context().Value(accessKey{}).(*access)
	return a
}

// roleAtLeast reports whether role satisfies min.
func roleAtLeast(role, min model.Role) bool { return min == "" || role.Rank() >= min.Rank() }

// authorizeUser checks a user token's role for the route. It returns the
// project the request acts on ("" when none) and whether it may go on.
func (s *Server) authorizeUser(rt Route, r *http.Request, tok *model.Token) (string, bool) {
	min, declared := MinRole[rt.Perm]
	if !declared {
		return "", false // an undeclared permission is nobody's
	}
	roles, global := s.cfg.Roles.Roles(tok)
	if global {
		return s.requestProject(rt, r), true
	}
	if min == "" {
		return "", true
	}
	if min == model.RoleAdmin {
		return "", false
	}
	anywhere := func() bool {
		for _, role := range roles {
			if roleAtLeast(role, min) {
				return true
			}
		}
		return false
	}
	project := s.requestProject(rt, r)
	if project == "" {
		return "", anywhere()
	}
	return project, roleAtLeast(roles[project], min)
}

// requestProject resolves the project a request names, where its route
// says to look; "" when there is none to check here.
func (s *Server) requestProject(rt Route, r *http.Request) string {
	switch rt.Project {
	case projectOfJob:
		p, _ := s.cfg.Controller.JobProject(r.PathValue("id"))
		return p
	case projectOfQuery:
		return r.URL.Query().Get("project")
	case projectOfPath:
		return r.PathValue("project")
	}
	return ""
}

// allowProject is the check a projectOfBody route makes once it knows the
// project: it answers 403 itself and returns false when the caller may not
// act there. Job tokens never reach it (their routes have no body project).
func (s *Server) allowProject(w http.ResponseWriter, r *http.Request, project string) bool {
	a := accessOf(r)
	if a == nil || a.tok == nil {
		writeProblem(w, r, http.StatusForbidden, "no caller", nil)
		return false
	}
	a.project = project
	if roleAtLeast(s.cfg.Roles.RoleIn(a.tok, project), MinRole[a.route.Perm]) {
		return true
	}
	writeProblem(w, r, http.StatusForbidden, fmt.Sprintf("this token may not %s in project %s", a.route.Perm, project), nil)
	return false
}

// visibleProjects returns the projects in which the caller holds at least
// min, or nil for a global admin (every project).
func (s *Server) visibleProjects(r *http.Request, min model.Role) map[string]bool {
	roles, global := s.cfg.Roles.Roles(caller(r))
	if global {
		return nil
	}
	out := map[string]bool{}
	for p, role := range roles {
		if roleAtLeast(role, min) {
			out[p] = true
		}
	}
	return out
}

// requestID takes a client's X-Request-Id when it is short and printable,
// else makes one.
func requestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	if id != "" && len(id) <= 64 && !strings.ContainsFunc(id, func(c rune) bool { return c <= 0x20 || c > 0x7e }) {
		return id
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

// audited reports whether a request's outcome goes to the audit log: every
// mutation (any verb but GET and HEAD) and every refusal. The agent
// protocol's successful calls are heartbeats and log shipping, not
// changes anyone made, so they are left out.
func audited(rt Route, method string, code int) bool {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		return true
	}
	if method == http.MethodGet || method == http.MethodHead {
		return false
	}
	// The agent protocol and a proxy's load reports and caller checks
	// are traffic, not changes.
	return rt.Perm != PermAgent && rt.Perm != PermServicesProxy
}

// auditEntry describes a request for the audit log: who, with which token,
// what, in which project, and the answer — never a body or a secret.
func auditEntry(rt Route, r *http.Request, a *access, code int) model.AuditEntry {
	e := model.AuditEntry{Action: rt.Method + " " + rt.Pattern, Object: r.URL.Path, RequestID: a.reqID, Result: code, Project: a.project}
	if a.tok != nil {
		e.Actor, e.TokenID = string(a.tok.Kind)+":"+a.tok.Subject, a.tok.ID
	}
	return e
}

// record writes one audit entry; a failure is logged, not answered, since
// the response has gone.
func (s *Server) record(ctx context.Context, rt Route, r *http.Request, a *access, code int) {
	if a.recorded {
		return
	}
	if _, err := s.cfg.Auditor.Audit(ctx, auditEntry(rt, r, a, code)); err != nil {
		s.cfg.Log.Error("recording audit entry", "request_id", a.reqID, "err", err)
	}
}

// ProjectView is a project and the caller's role in it.
type ProjectView struct {
	Name string             `json:"name"`
	Role model.Role         `json:"role,omitempty"`
	Spec *model.ProjectSpec `json:"spec,omitempty"`
}

// ProjectList is the body of GET /v1/projects.
type ProjectList struct {
	Projects []ProjectView `json:"projects"`
}

// GrantResult answers PUT /v1/grants: the grant, and warnings about it
// (e.g. a project the fleet does not declare).
type GrantResult struct {
	model.Grant
	Warnings []string `json:"warnings,omitempty"`
}

// GrantList is the body of GET /v1/grants.
type GrantList struct {
	Grants []model.Grant `json:"grants"`
}

// AuditList is the body of GET /v1/audit.
type AuditList struct {
	Entries []*model.AuditEntry `json:"entries"`
}

// AuditReader reads the audit log; *sqlite.Store is one.
type AuditReader interface {
	// Audit returns up to limit entries after sequence number after,
	// oldest first (limit ≤ 0: all).
	Audit(ctx context.Context, after uint64, limit int) ([]*model.AuditEntry, error)
}

// listProjects shows the declared projects, the default project and any
// project the caller holds a role in, each with the caller's role; a user
// sees only the projects they hold a role in.
func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) {
	roles, global := s.cfg.Roles.Roles(caller(r))
	specs := map[string]*model.ProjectSpec{}
	names := map[string]bool{model.DefaultProject: true}
	for _, p := range s.cfg.Controller.Projects() {
		specs[p.Name] = &p.Spec
		names[p.Name] = true
	}
	for p := range roles {
		names[p] = true
	}
	if global { // an admin sees every project someone holds a role in, declared or not
		for _, g := range s.cfg.Roles.Grants() {
			if g.Project != "*" {
				names[g.Project] = true
			}
		}
	}
	out := []ProjectView{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		v := ProjectView{Name: name, Spec: specs[name]}
		switch {
		case global:
			v.Role = model.RoleAdmin
		case roles[name] != "":
			v.Role = roles[name]
		default:
			continue
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, ProjectList{Projects: out})
}

func (s *Server) listGrants(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, GrantList{Grants: nonNil(s.cfg.Roles.Grants())})
}

func (s *Server) putGrant(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var g model.Grant
	if problems := manifest.DecodeJSON(body, &g); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	if fe := g.Validate(""); len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	accessOf(r).project = g.Project
	g, err := s.cfg.Roles.Grant(r.Context(), g)
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, GrantResult{Grant: g, Warnings: s.undeclaredProject(g.Project)})
}

// undeclaredProject warns of a grant on a project that is neither the
// default one nor declared by the fleet: the grant holds (a project is
// only a name until declared), but a typo would go unnoticed and no
// project policy applies, so it says how to declare one.
func (s *Server) undeclaredProject(project string) []string {
	if project == model.AllProjects || project == model.DefaultProject {
		return nil
	}
	for _, p := range s.cfg.Controller.Projects() {
		if p.Name == project {
			return nil
		}
	}
	return []string{fmt.Sprintf("project %s is not declared: no project policy applies to it and `gpufleet projects` shows it only to those who hold a role there. "+
		"Declare it in the fleet: a document `apiVersion: gpufleet.dev/v1`, `kind: Project`, `metadata: {name: %s}`, applied with `gpufleet apply -f FILE`", project, project)}
}

func (s *Server) deleteGrant(w http.ResponseWriter, r *http.Request) {
	project := r.PathValue("project")
	accessOf(r).project = project
	if err := s.cfg.Roles.RevokeGrant(r.Context(), r.PathValue("user"), project); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Audit == nil {
		writeProblem(w, r, http.StatusNotImplemented, "this server keeps no readable audit log", nil)
		return
	}
	q := r.URL.Query()
	var fe model.FieldErrors
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fe.Add("query.after", "must be a sequence number")
		}
		after = n
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fe.Add("query.limit", "must be a positive integer")
		}
		limit = n
	}
	if len(fe) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", fe)
		return
	}
	entries, err := s.cfg.Audit.Audit(r.Context(), after, limit)
	if err != nil {
		writeProblem(w, r, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, AuditList{Entries: nonNil(entries)})
}

// rotateToken replaces the caller's own token: a new secret for the same
// kind, subject, name and admin flag, valid as long as the old one was
// meant to live, and the old one revoked at once. `gpufleet tokens
// rotate-admin` uses it on the admin token that `up` made.
func (s *Server) rotateToken(w http.ResponseWriter, r *http.Request) {
	tok := caller(r)
	created, secret, err := s.cfg.Identity.RotateToken(r.Context(), tok.ID)
	if err != nil {
		if errors.Is(err, model.ErrConflict) {
			writeProblem(w, r, http.StatusConflict, err.Error(), nil)
			return
		}
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusCreated, TokenCreated{Token: created, Secret: secret})
}

// RouteProject names where a route finds its project: none, job, query,
// body or path. Tests pin it per route.
func RouteProject(rt Route) string { return rt.Project.String() }
