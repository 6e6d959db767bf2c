package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufleet/gpufleet/internal/advisor"
	"github.com/gpufleet/gpufleet/internal/api/endpoints"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

var (
	errNotFound = model.ErrNotFound
	errConflict = model.ErrConflict
)

// Config wires a Server.
type Config struct {
	Controller Backend          // required
	Catalog    *catalog.Catalog // required
	Logs       *logstore.Store  // required
	// Identity, Roles, Auditor and Secrets are required; the server
	// passes the controller's components (identity, auditlog, vault), so
	// authenticating a request never waits for the scheduling lock.
	Identity Identity
	Roles    Roles
	Auditor  Auditor
	Secrets  Secrets
	// PoolPrice prices a NodePool by its driver for `gpufleet plan`
	// (the provider registry's); nil leaves pools unpriced.
	PoolPrice provider.PoolPricer
	// CheckPool fills in a NodePool's driver defaults and reports what
	// its driver finds wrong with it (the provider registry's CheckPool);
	// nil leaves pools' driver settings unchecked.
	CheckPool func(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors
	// Owned lists the offers of machines that exist already (the
	// fixed-capacity pools' machines at their declared prices), which
	// GET /v1/offers and POST /v1/advise show beside the catalog's; nil:
	// none.
	Owned func(ctx context.Context) []model.Offer
	// Archives stores uploaded working directories; nil refuses uploads.
	Archives *archive.Store
	Log      *slog.Logger
	// Registry serves /metrics and receives the API's own series.
	Registry *prometheus.Registry
	// MaxBodyBytes bounds request bodies (1 MiB).
	MaxBodyBytes int64
	// MaxInflightWrites bounds the users' writes (submissions, cancels,
	// applies…) served at once; one more is answered 503 with Retry-After,
	// so that agents' syncs never queue behind a flood of them (0:
	// DefaultMaxInflightWrites; negative: no limit).
	MaxInflightWrites int
	Version           string
	// Ready reports whether the server can take writes; nil means yes.
	Ready func() error
	// Leader, with replicas (HA), describes this replica as the leader on
	// /readyz (a line after "ready", and X-Gpufleet-Role: leader).
	Leader func() string
	// Calibration holds GPU rates measured by `gpufleet bench`; the
	// advisor uses them instead of datasheet rates where present.
	Calibration advisor.Calibration
	// Sessions authenticates dashboard requests that carry a session
	// cookie instead of a bearer token (package web); nil: bearer only.
	Sessions Sessions
	// UI, when set, serves the dashboard under /ui/ (and / redirects there).
	UI http.Handler
	// Audit reads the audit log for GET /v1/audit; nil answers 501.
	Audit AuditReader
	// Services runs inference services (/v1/services, /services/NAME/);
	// nil answers 501.
	Services Services
	// GitOps reports the repository the server follows (GET /v1/gitops,
	// and the drift report); nil when the server follows none.
	GitOps GitOps
	// Joiner exchanges launched instances' join tokens (POST
	// /v1/agent/join); nil answers 501.
	Joiner Joiner
	// Artifacts is the artefact catalogue (/v1/artifacts); nil answers
	// 501.
	Artifacts Artifacts
}

// GitOps is the server's GitOps component (package gitops).
type GitOps interface {
	Status() gitops.Status
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	handler  http.Handler
	metricsH http.Handler
	duration *prometheus.HistogramVec
	shed     *shedder
	openapi  []byte
	// origins refuses cross-origin state-changing browser requests.
	origins *http.CrossOriginProtection
}

// New builds the server and its mux from the route table.
func New(cfg Config) (*Server, error) {
	if cfg.Controller == nil || cfg.Identity == nil || cfg.Roles == nil || cfg.Auditor == nil || cfg.Secrets == nil || cfg.Catalog == nil || cfg.Logs == nil {
		return nil, errors.New("api config: Controller, Identity, Roles, Auditor, Secrets, Catalog and Logs are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	s := &Server{cfg: cfg}
	var err error
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpufleet_api_request_duration_seconds",
		Help:    "API request duration by route and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
	}, []string{"route", "code"})
	if err := cfg.Registry.Register(s.duration); err != nil {
		return nil, err
	}
	if cfg.MaxInflightWrites == 0 {
		cfg.MaxInflightWrites = DefaultMaxInflightWrites
	}
	if s.shed, err = newShedder(cfg.MaxInflightWrites, cfg.Registry); err != nil {
		return nil, err
	}
	doc, err := OpenAPI(cfg.Version)
	if err != nil {
		return nil, err
	}
	s.openapi = doc
	s.origins = http.NewCrossOriginProtection()
	s.metricsH = promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	for _, rt := range Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, s.wrap(rt))
	}
	if cfg.UI != nil {
		mux.Handle("/ui/", s.origins.Handler(cfg.UI))
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusSeeOther))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, "no such route; see /v1/openapi.json", nil)
	})
	s.handler = mux
	if cfg.Services != nil {
		// A service's host, then /services/NAME/…, before the API's routes.
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !cfg.Services.ServeRoute(w, r, s.authorizeCaller) {
				mux.ServeHTTP(w, r)
			}
		})
	}
	return s, nil
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return s.handler }

type ctxKey struct{}

// caller returns the authenticated token of a request.
func caller(r *http.Request) *model.Token {
	t, _ := r.Context().Value(ctxKey{}).(*model.Token)
	return t
}

// statusRecorder remembers the status code for metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// wrap adds metrics, body limits, authentication, authorisation and, for
// users' writes, load shedding.
func (s *Server) wrap(rt Route) http.Handler {
	h := rt.handler(s)
	label := rt.Method + " " + rt.Pattern
	shed := sheddable(rt)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			code := rec.code
			if code == 0 {
				code = http.StatusOK
			}
			s.duration.WithLabelValues(label, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
		}()
		limit := s.cfg.MaxBodyBytes
		if rt.MaxBody > 0 {
			limit = rt.MaxBody
		}
		r.Body = http.MaxBytesReader(rec, r.Body, limit)
		a := &access{route: rt, reqID: requestID(r)}
		rec.Header().Set("X-Request-Id", a.reqID)
		r = r.WithContext(context.WithValue(r.Context(), accessKey{}, a))
		if !rt.Public {
			// Recorded after the handler, with the status it answered.
			defer func() {
				if code := cmp.Or(rec.code, http.StatusOK); audited(rt, r.Method, code) {
					s.record(r.Context(), rt, r, a, code)
				}
			}()
			// Browsers send Origin (and Sec-Fetch-Site) on state-changing
			// requests: one from another origin is refused, so a page
			// elsewhere cannot ride a dashboard session. Non-browser
			// clients send neither and pass.
			if err := s.origins.Check(r); err != nil {
				writeProblem(rec, r, http.StatusForbidden, "cross-origin request refused: "+err.Error(), nil)
				return
			}
			tok, project, problem := s.authorize(rt, r)
			a.tok, a.project = tok, project
			if problem != 0 {
				if problem == http.StatusUnauthorized {
					rec.Header().Set("WWW-Authenticate", `Bearer realm="gpufleet"`)
					writeProblem(rec, r, problem, "a valid bearer token is required: this one is missing, unknown, revoked or expired", nil)
				} else {
					writeProblem(rec, r, problem, "this token may not "+string(rt.Perm)+forProject(project), nil)
				}
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tok))
		}
		if shed {
			release, ok := s.shed.admit(rec, r, label)
			if !ok {
				// Nothing changed: auditing it would add the very
				// writes that shedding keeps out.
				a.recorded = true
				return
			}
			defer release()
		}
		h(rec, r)
	})
}

func forProject(p string) string {
	if p == "" {
		return ""
	}
	return " in project " + p
}

// authorize checks the bearer token against the route's declaration: its
// token kinds and scope, then, for a user token, the role the route's
// permission needs in the project the request acts on (MinRole). It returns
// the token and that project, or the status to refuse with.
func (s *Server) authorize(rt Route, r *http.Request) (*model.Token, string, int) {
	tok, err := s.authenticate(r)
	if err != nil {
		return nil, "", http.StatusUnauthorized
	}
	if !slices.Contains(rt.Kinds, tok.Kind) {
		return tok, "", http.StatusForbidden
	}
	switch tok.Kind {
	case model.TokenJob:
		if rt.Scope == scopeOwnJob && r.PathValue("id") != tok.Subject {
			return tok, "", http.StatusForbidden
		}
		p, _ := s.cfg.Controller.JobProject(tok.Subject)
		return tok, p, 0
	case model.TokenUser:
		project, ok := s.authorizeUser(rt, r, tok)
		if !ok {
			return tok, project, http.StatusForbidden
		}
		return tok, project, 0
	}
	return tok, "", 0
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			writeProblem(w, r, http.StatusServiceUnavailable, err.Error(), nil)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	if s.cfg.Leader != nil {
		w.Header().Set(endpoints.RoleHeader, "leader")
		_, _ = w.Write([]byte("ready\n" + s.cfg.Leader() + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	s.metricsH.ServeHTTP(w, r)
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.openapi)
}
