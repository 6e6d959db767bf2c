package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/archive"
	"github.com/gpufleet/gpufleet/internal/artifacts"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/controller/auditlog"
	"github.com/gpufleet/gpufleet/internal/controller/identity"
	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/registry"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/static"
	"github.com/gpufleet/gpufleet/internal/services"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// envConfig tunes newEnv; the zero value means defaults.
type envConfig struct {
	// MaxBodyBytes is the API's body limit (0: the API's default).
	MaxBodyBytes int64
	// Clock drives the controller (nil: the wall clock). A fake clock
	// stalls Sync's long poll, so fakeAgent needs the wall clock.
	Clock clock.Clock
	// Ready is the API's readiness check (nil: always ready).
	Ready func() error
	// Dir holds the database and logs (empty: a new temp dir), so a test
	// can restart a server on the same state.
	Dir string
	// Archives makes the server store uploaded workdirs (under Dir).
	Archives bool
	// Owned lists owned machines' offers (api.Config.Owned).
	Owned func(context.Context) []model.Offer
	// Artifacts serves /v1/artifacts from a catalogue over the
	// controller (package artifacts), as the server wires it.
	Artifacts bool
	// MaxInflightWrites is the API's limit of users' writes (0: its
	// default).
	MaxInflightWrites int
	// Backend, when set, wraps the controller as the API's Backend (a
	// test's held or slowed submissions).
	Backend func(api.Backend) api.Backend
}

// testEnv is a whole server as cmd/gpufleet wires it: the real SQLite store
// (durable commits) in a temp dir, the controller running its loop, and the
// API on a loopback listener. No agent runs: jobs stay queued unless a test
// plays the agent with registerNode.
type testEnv struct {
	ctrl  *controller.Controller
	store *sqlite.Store
	logs  *logstore.Store
	reg   *prometheus.Registry
	http  *httptest.Server
	// admin is the secret of an admin user token valid for an hour.
	admin string
}

// newEnv starts a server and stops it at cleanup, in the order serve does:
// HTTP first, then the controller loop, then the commit acknowledger, then
// the store.
// The controller is what the server passes as the API's Backend, and its
// components as the rest.
var (
	_ api.Backend  = (*controller.Controller)(nil)
	_ api.Identity = (*identity.Identity)(nil)
	_ api.Roles    = (*identity.Identity)(nil)
	_ api.Auditor  = (*auditlog.Log)(nil)
	_ api.Secrets  = (*vault.Vault)(nil)
)

func newEnv(tb testing.TB, cfg envConfig) *testEnv {
	tb.Helper()
	ctx := context.Background()
	dir := cfg.Dir
	if dir == "" {
		dir = tb.TempDir()
	}
	reg := prometheus.NewRegistry()
	// As cmd/gpufleet/server.go wires it.
	commitSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gpufleet_store_commit_seconds", Help: "Store transaction latency, begin to fsync.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	reg.MustRegister(commitSeconds)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "gpufleet.db"), sqlite.Options{
		CommitObserver: func(d time.Duration, _ int) { commitSeconds.Observe(d.Seconds()) },
	})
	if err != nil {
		tb.Fatalf("opening store: %v", err)
	}
	logs, err := logstore.New(filepath.Join(dir, "logs"))
	if err != nil {
		tb.Fatal(err)
	}
	var archives *archive.Store
	if cfg.Archives {
		if archives, err = archive.NewStore(filepath.Join(dir, "archives")); err != nil {
			tb.Fatal(err)
		}
	}
	// The listener exists before the controller so that jobs are handed
	// the real server URL; the handler is set before the server starts.
	ts := httptest.NewUnstartedServer(nil)
	var ctrl *controller.Controller
	ctrl, err = controller.New(ctx, controller.Config{
		Store: st, Logs: logs, Clock: cfg.Clock, Keyring: testKeyring(tb), Archives: archives,
		ServerURL:     "http://" + ts.Listener.Addr().String(),
		CheckpointDir: filepath.Join(dir, "checkpoints"),
		Metrics:       controller.NewMetrics(reg, func() map[model.JobState]int { return ctrl.JobCounts() }),
		Fatal:         func(err error) { tb.Errorf("controller: store failed: %v", err) },
	})
	if err != nil {
		tb.Fatalf("starting controller: %v", err)
	}
	reg.MustRegister(ctrl.CostCollector()) // as serve does
	cat, err := catalog.Load()
	if err != nil {
		tb.Fatalf("loading catalog: %v", err)
	}
	drivers, err := registry.New(registry.Driver{Name: model.ProviderSim, Price: sim.PoolPrice, Check: sim.CheckPool}, registry.Driver{Name: model.ProviderStatic, Price: static.PoolPrice, Check: static.CheckPool})
	if err != nil {
		tb.Fatal(err)
	}
	// Services are kept but not reconciled (no Run): the API tests
	// check their access and validation, not their replicas.
	svcs, err := services.New(services.Config{Controller: ctrl, Committer: ctrl.Committer(), Stored: ctrl.StoredServices(), Keys: ctrl.Vault(), Clock: cfg.Clock})
	if err != nil {
		tb.Fatal(err)
	}
	var arts api.Artifacts
	if cfg.Artifacts {
		if arts, err = artifacts.New(artifacts.Config{Fleet: ctrl, Keys: ctrl.Vault()}); err != nil {
			tb.Fatal(err)
		}
	}
	var backend api.Backend = ctrl
	if cfg.Backend != nil {
		backend = cfg.Backend(ctrl)
	}
	srv, err := api.New(api.Config{
		Artifacts: arts, Controller: backend, Identity: ctrl.Identity(), Roles: ctrl.Identity(), Auditor: ctrl.AuditLog(), Secrets: ctrl.Vault(), Catalog: cat, Logs: logs, Registry: reg, Archives: archives, PoolPrice: drivers.Price, CheckPool: drivers.CheckPool, Owned: cfg.Owned,
		MaxBodyBytes: cfg.MaxBodyBytes, Version: "test", Ready: cfg.Ready, Audit: st, Services: svcs, Joiner: ctrl,
		MaxInflightWrites: cfg.MaxInflightWrites,
	})
	if err != nil {
		tb.Fatalf("building API: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- ctrl.Run(runCtx) }()
	ts.Config.Handler = srv.Handler()
	ts.Start()
	tb.Cleanup(func() {
		ts.Close()
		stop()
		if err := <-ran; err != nil {
			tb.Errorf("controller run: %v", err)
		}
		ctrl.Close()
		if err := st.Close(); err != nil {
			tb.Errorf("closing store: %v", err)
		}
	})
	_, admin, err := ctrl.Identity().CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "admin", Admin: true, TTL: time.Hour})
	if err != nil {
		tb.Fatalf("creating admin token: %v", err)
	}
	return &testEnv{ctrl: ctrl, store: st, logs: logs, reg: reg, http: ts, admin: admin}
}

// token creates a token directly on the controller and returns its id and
// secret.
func (e *testEnv) token(tb testing.TB, r model.TokenRequest) (id, secret string) {
	tb.Helper()
	if r.TTL == 0 {
		r.TTL = time.Hour
	}
	tok, secret, err := e.ctrl.Identity().CreateToken(context.Background(), r)
	if err != nil {
		tb.Fatalf("creating token: %v", err)
	}
	return tok.ID, secret
}

// reply is a read HTTP response.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// req is one HTTP request to the test server.
type req struct {
	Method, Path string
	// Token is a bearer secret; empty sends no Authorization header.
	Token  string
	Header map[string]string
	Body   []byte
}

// do sends r and reads the whole response.
func (e *testEnv) do(tb testing.TB, r req) reply {
	tb.Helper()
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	hr, err := http.NewRequest(r.Method, e.http.URL+r.Path, body)
	if err != nil {
		tb.Fatal(err)
	}
	if r.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Header {
		hr.Header.Set(k, v)
	}
	resp, err := e.http.Client().Do(hr)
	if err != nil {
		tb.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: reading body: %v", r.Method, r.Path, err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// problem decodes an application/problem+json reply, failing the test if it
// is not one.
func problem(tb testing.TB, r reply) api.Problem {
	tb.Helper()
	if ct := r.Header.Get("Content-Type"); ct != api.ProblemContentType {
		tb.Fatalf("Content-Type = %q, want %q (status %d, body %s)", ct, api.ProblemContentType, r.Status, r.Body)
	}
	var p api.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		tb.Fatalf("decoding problem %s: %v", r.Body, err)
	}
	if p.Status != r.Status {
		tb.Errorf("problem status = %d, HTTP status %d", p.Status, r.Status)
	}
	return p
}

// problemPaths returns the field paths of a problem, in its order.
func problemPaths(p api.Problem) []string {
	out := []string{}
	for _, e := range p.Errors {
		out = append(out, e.Path)
	}
	return out
}

// jobManifest is a valid 1×H100 job; name distinguishes bodies.
func jobManifest(name string) []byte {
	return []byte(`{
  "apiVersion": "gpufleet.dev/v1",
  "kind": "Job",
  "metadata": {"name": "` + name + `", "tags": {"team": "nlp"}},
  "spec": {
    "resources": {"gpus": 1, "gpu": {"models": ["H100"]}},
    "run": {"command": ["python", "train.py", "--epochs", "3"], "env": {"LR": "3e-4"}}
  }
}`)
}

// submit posts a manifest as the admin and returns the job's id.
func (e *testEnv) submit(tb testing.TB, manifest []byte) string {
	tb.Helper()
	r := e.do(tb, req{Method: "POST", Path: "/v1/jobs", Token: e.admin, Header: map[string]string{"Content-Type": "application/json"}, Body: manifest})
	if r.Status != http.StatusCreated {
		tb.Fatalf("submitting: status %d: %s", r.Status, r.Body)
	}
	var v api.JobView
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Job == nil {
		tb.Fatalf("decoding job view %s: %v", r.Body, err)
	}
	return v.ID
}

// fakeAgent plays a node's agent by calling the controller's agent protocol
// directly, as the in-process local agent does.
type fakeAgent struct {
	ctrl *controller.Controller
	node string
	gen  uint64
}

// registerNode registers a node with gpus H100s.
func (e *testEnv) registerNode(tb testing.TB, gpus int) *fakeAgent {
	tb.Helper()
	reg := agentapi.Registration{Name: "test-node", Provider: "local", CPU: 16, Memory: 64 * model.GiB, Region: "local"}
	for i := range gpus {
		reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: "GPU-" + strings.Repeat("a", i+1), Model: "H100", Memory: 80 * model.GiB})
	}
	resp, err := e.ctrl.Register(context.Background(), reg)
	if err != nil {
		tb.Fatalf("registering node: %v", err)
	}
	return &fakeAgent{ctrl: e.ctrl, node: resp.NodeID}
}

// report sends replica statuses and returns the desired set.
func (a *fakeAgent) report(tb testing.TB, statuses ...agentapi.ReplicaStatus) agentapi.SyncResponse {
	tb.Helper()
	resp, err := a.ctrl.Sync(context.Background(), agentapi.SyncRequest{NodeID: a.node, Statuses: statuses})
	if err != nil {
		tb.Fatalf("sync: %v", err)
	}
	a.gen = resp.Generation
	return resp
}

// waitReplicas long-polls Sync, as a real agent does, until the desired set
// has n replicas.
func (a *fakeAgent) waitReplicas(tb testing.TB, n int) []agentapi.ReplicaSpec {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := a.ctrl.Sync(context.Background(), agentapi.SyncRequest{NodeID: a.node, Generation: a.gen, Wait: model.Duration(time.Second)})
		if err != nil {
			tb.Fatalf("sync: %v", err)
		}
		a.gen = resp.Generation
		if len(resp.Replicas) == n {
			return resp.Replicas
		}
		if time.Now().After(deadline) {
			tb.Fatalf("desired set has %d replicas after 10s, want %d", len(resp.Replicas), n)
		}
	}
}

// waitJob polls until the job reaches want.
func (e *testEnv) waitJob(tb testing.TB, id string, want model.JobState) *model.Job {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		changed := e.ctrl.Changed()
		j, err := e.ctrl.Job(id)
		if err != nil {
			tb.Fatal(err)
		}
		if j.State == want {
			return j
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
			tb.Fatalf("job %s is %s (%s) after 10s, want %s", id, j.State, j.Reason, want)
		}
	}
}

func runningStatus(id string) agentapi.ReplicaStatus {
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseRunning, StartedAt: time.Now()}
}

func exitedStatus(id string, code int) agentapi.ReplicaStatus {
	now := time.Now()
	return agentapi.ReplicaStatus{ID: id, Phase: agentapi.PhaseExited, ExitCode: &code, StartedAt: now, EndedAt: &now}
}

// testKeyring is a fresh sealing keyring for one test server.
func testKeyring(tb testing.TB) *secrets.Keyring {
	tb.Helper()
	k, err := secrets.NewKey()
	if err != nil {
		tb.Fatal(err)
	}
	kr, err := secrets.ParseKeys(k)
	if err != nil {
		tb.Fatal(err)
	}
	return kr
}
