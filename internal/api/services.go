package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Services keeps inference services and proxies /services/NAME/… to their
// replicas (package services). Config.Services holds one; nil answers 501.
type Services interface {
	// Apply creates s or replaces its spec (created true when new).
	Apply(ctx context.Context, s model.Service) (model.ServiceStatus, bool, error)
	// List returns the services of projects (nil: every project).
	List(projects map[string]bool) []model.ServiceStatus
	Get(name string) (model.ServiceStatus, error)
	Delete(ctx context.Context, name string) error
	// ServeRoute serves r and reports true when it is for a service (on
	// a service's host, or at /services/NAME/…); authorize decides
	// token-auth services (0: allowed, else the status to refuse with).
	ServeRoute(w http.ResponseWriter, r *http.Request, authorize func(r *http.Request, project string) int) bool
	// Endpoints returns the proxies' table: at once when its version is
	// not after, else once it changes or ctx ends.
	Endpoints(ctx context.Context, after uint64) model.ProxyTable
	// Report takes a separate proxy's load report.
	Report(r model.ProxyReport)
	// AuthorizeDigest answers whether the bearer secret whose SHA-256 is
	// digest may call service name (0, else the status to refuse with);
	// token checks a user token by hash and its role in project.
	AuthorizeDigest(name string, digest []byte, token func(digest []byte, project string) int) int
}

// ProxyCaller is POST /v1/proxy/authorize: may the caller whose bearer
// secret hashes (SHA-256, hex) to Digest call Service?
type ProxyCaller struct {
	Service string `json:"service"`
	Digest  string `json:"digest"`
}

// ProxyVerdict answers ProxyCaller: Status 0 lets the caller in; else the
// status to refuse with (401, 404).
type ProxyVerdict struct {
	Status int `json:"status"`
}

// endpointsWait bounds a watch of the endpoint list.
const endpointsWait = 25 * time.Second

// ServiceManifest is a Service manifest (manifest.Service): what
// POST /v1/services takes as JSON or YAML.
type ServiceManifest = manifest.Service

// ServiceView is a service as the API shows it.
type ServiceView = model.ServiceStatus

// ServiceList is GET /v1/services.
type ServiceList struct {
	Services []ServiceView `json:"services"`
}

func serviceRoutes() []Route {
	return []Route{
		{Method: "POST", Pattern: "/v1/services", Project: projectOfBody, Perm: PermJobsSubmit, Kinds: users,
			Summary: "Create or update a service (a Service manifest as JSON or YAML); a changed spec rolls its replicas.",
			Request: ServiceManifest{}, Response: ServiceView{}, Status: 201,
			handler: func(s *Server) http.HandlerFunc { return s.applyService }},
		{Method: "GET", Pattern: "/v1/services", Project: projectOfQuery, Perm: PermJobsRead, Kinds: users,
			Summary: "Services of the projects the caller may read, with their replicas.",
			Query:   []Param{{"project", "string", "project name"}}, Response: ServiceList{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.listServices }},
		{Method: "GET", Pattern: "/v1/services/{name}", Perm: PermJobsRead, Kinds: users,
			Summary:  "One service: its spec, replicas, requests, tokens and the autoscaler's latest decisions.",
			Response: ServiceView{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.getService }},
		{Method: "DELETE", Pattern: "/v1/services/{name}", Perm: PermJobsCancel, Kinds: users,
			Summary: "Delete a service; its replicas are cancelled.", Status: 204,
			handler: func(s *Server) http.HandlerFunc { return s.deleteService }},
		{Method: "GET", Pattern: "/v1/proxy/endpoints", Perm: PermServicesProxy, Kinds: proxies,
			Summary:  "For a separate gpufleet proxy (proxy tokens only): every service's route (auth mode, hosts, queue bounds, replica key) and ready replicas. With after=VERSION it waits (up to 25 s) until the table's version differs.",
			Query:    []Param{{"after", "integer", "the version the caller holds: wait for another"}},
			Response: model.ProxyTable{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.proxyEndpoints }},
		{Method: "POST", Pattern: "/v1/proxy/load", Perm: PermServicesProxy, Kinds: proxies,
			Summary: "For a separate gpufleet proxy: its load per service (in flight, waiting, rate, latency, counts since its last report), which the autoscaler adds to the server's own.",
			Request: model.ProxyReport{}, Status: 204,
			handler: func(s *Server) http.HandlerFunc { return s.proxyLoad }},
		{Method: "POST", Pattern: "/v1/proxy/authorize", Perm: PermServicesProxy, Kinds: proxies,
			Summary: "For a separate gpufleet proxy: may the caller whose bearer secret has this SHA-256 call the service (0), or with which status is it refused?",
			Request: ProxyCaller{}, Response: ProxyVerdict{}, Status: 200,
			handler: func(s *Server) http.HandlerFunc { return s.proxyAuthorize }},
	}
}

func (s *Server) servicesOK(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Services == nil {
		writeProblem(w, r, http.StatusNotImplemented, "this server runs no services", nil)
		return false
	}
	return true
}

func (s *Server) applyService(w http.ResponseWriter, r *http.Request) {
	if !s.servicesOK(w, r) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	format := manifest.JSON
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.Contains(mt, "yaml") {
		format = manifest.YAML
	}
	m, problems := manifest.ParseService(body, format, s.cfg.Catalog.KnownGPU)
	if len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "the service is invalid; fix the fields below", problems)
		return
	}
	for i, g := range m.Spec.Template.Resources.GPU.Models {
		if c, ok := s.cfg.Catalog.CanonicalGPU(g); ok {
			m.Spec.Template.Resources.GPU.Models[i] = c
		}
	}
	project := m.Metadata.Project
	if project == "" {
		project = model.DefaultProject
	}
	if !s.allowProject(w, r, project) {
		return
	}
	admin := s.cfg.Roles.RoleIn(caller(r), project) == model.RoleAdmin
	if fe := m.Spec.Template.HostPaths("spec.template"); len(fe) > 0 && !admin {
		writeProblem(w, r, http.StatusBadRequest, "the replica template asks for host access, which only admins may grant", fe)
		return
	}
	st, created, err := s.cfg.Services.Apply(r.Context(), model.Service{Name: m.Metadata.Name, Project: project,
		User: caller(r).Subject, Tags: m.Metadata.Tags, Spec: m.Spec, Trusted: admin})
	var fe model.FieldErrors
	if errors.As(err, &fe) {
		writeProblem(w, r, http.StatusBadRequest, "the service is invalid; fix the fields below", fe)
		return
	}
	if err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.Header().Set("Location", "/v1/services/"+st.Name)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, st)
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) {
	if !s.servicesOK(w, r) {
		return
	}
	projects := s.visibleProjects(r, model.RoleViewer)
	if p := r.URL.Query().Get("project"); p != "" {
		projects = map[string]bool{p: projects == nil || projects[p]}
	}
	writeJSON(w, http.StatusOK, ServiceList{Services: s.cfg.Services.List(projects)})
}

// visibleService returns the service named in the path if the caller holds
// at least min in its project; otherwise it answers 404 (a service of a
// project the caller cannot see does not exist for them) or 403.
func (s *Server) visibleService(w http.ResponseWriter, r *http.Request, min model.Role) (model.ServiceStatus, bool) {
	if !s.servicesOK(w, r) {
		return model.ServiceStatus{}, false
	}
	st, err := s.cfg.Services.Get(r.PathValue("name"))
	if err == nil {
		role := s.cfg.Roles.RoleIn(caller(r), st.Project)
		if _, global := s.cfg.Roles.Roles(caller(r)); !global && !roleAtLeast(role, model.RoleViewer) {
			err = model.ErrNotFound
		} else if !global && !roleAtLeast(role, min) {
			writeProblem(w, r, http.StatusForbidden, "this token may not change services in project "+st.Project, nil)
			return model.ServiceStatus{}, false
		}
	}
	if err != nil {
		writeProblem(w, r, statusOf(err), "service "+r.PathValue("name")+": not found", nil)
		return model.ServiceStatus{}, false
	}
	if a := accessOf(r); a != nil {
		a.project = st.Project
	}
	return st, true
}

func (s *Server) getService(w http.ResponseWriter, r *http.Request) {
	if st, ok := s.visibleService(w, r, model.RoleViewer); ok {
		writeJSON(w, http.StatusOK, st)
	}
}

func (s *Server) deleteService(w http.ResponseWriter, r *http.Request) {
	st, ok := s.visibleService(w, r, model.RoleMember)
	if !ok {
		return
	}
	if err := s.cfg.Services.Delete(r.Context(), st.Name); err != nil {
		writeProblem(w, r, statusOf(err), err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// authorizeCaller decides token-auth services on the server's own proxy:
// user tokens with a role in the service's project; a valid token without
// one gets 404, as the API answers for a service it may not see. Job,
// node and proxy tokens are refused (a workload's own token does not open
// its project's services), and so are dashboard sessions (a page could
// ride them).
func (s *Server) authorizeCaller(r *http.Request, project string) int {
	secret, ok := auth.Bearer(r.Header.Get("Authorization"))
	if !ok {
		return http.StatusUnauthorized
	}
	return s.authorizeHash(auth.Hash(secret), project)
}

// authorizeHash is authorizeCaller for a token's hash.
func (s *Server) authorizeHash(hash []byte, project string) int {
	tok, err := s.cfg.Identity.AuthenticateHash(hash)
	if err != nil || tok.Kind != model.TokenUser {
		return http.StatusUnauthorized
	}
	if _, global := s.cfg.Roles.Roles(tok); global || roleAtLeast(s.cfg.Roles.RoleIn(tok, project), model.RoleViewer) {
		return 0
	}
	return http.StatusNotFound
}

func (s *Server) proxyEndpoints(w http.ResponseWriter, r *http.Request) {
	if !s.servicesOK(w, r) {
		return
	}
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "query.after", Message: "must be a non-negative integer"}})
			return
		}
		after = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), endpointsWait)
	defer cancel()
	writeJSON(w, http.StatusOK, s.cfg.Services.Endpoints(ctx, after))
}

func (s *Server) proxyLoad(w http.ResponseWriter, r *http.Request) {
	if !s.servicesOK(w, r) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var rep model.ProxyReport
	if problems := manifest.DecodeJSON(body, &rep); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	// One report per proxy process, under its token: a proxy cannot speak
	// for another token's, and processes sharing a token name themselves.
	if !validInstance(rep.Proxy) {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "proxy", Message: "must be 0 to 32 letters and digits naming the proxy process"}})
		return
	}
	rep.Proxy = caller(r).ID + "/" + rep.Proxy
	s.cfg.Services.Report(rep)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) proxyAuthorize(w http.ResponseWriter, r *http.Request) {
	if !s.servicesOK(w, r) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var q ProxyCaller
	if problems := manifest.DecodeJSON(body, &q); len(problems) > 0 {
		writeProblem(w, r, http.StatusBadRequest, "", problems)
		return
	}
	digest, err := hex.DecodeString(q.Digest)
	if err != nil || len(digest) != sha256.Size {
		writeProblem(w, r, http.StatusBadRequest, "", model.FieldErrors{{Path: "digest", Message: "must be the hex SHA-256 of the caller's bearer secret"}})
		return
	}
	writeJSON(w, http.StatusOK, ProxyVerdict{Status: s.cfg.Services.AuthorizeDigest(q.Service, digest, s.authorizeHash)})
}

// validInstance reports whether s names a proxy process: up to 32 ASCII
// letters and digits.
func validInstance(s string) bool {
	if len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
