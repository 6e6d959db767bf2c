package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
	"github.com/gpufleet/gpufleet/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeControl runs each submitted replica as a real HTTP server on
// 127.0.0.1:$PORT that answers with its generation's reply.
type fakeControl struct {
	mu      sync.Mutex
	jobs    map[string]*model.Job
	servers map[string]*http.Server
	n       int
	hold    bool // leave submitted jobs queued
	submits int
	cancels int
	events  []model.Event
	// stopping are jobs whose attempt the controller stops (a notice).
	stopping map[string]bool
	// endpoint, when set, is every attempt's replica endpoint (as a
	// Kubernetes runner reports its Service).
	endpoint string
	t        *testing.T
}

func newFake(t testing.TB) *fakeControl {
	f := &fakeControl{jobs: map[string]*model.Job{}, servers: map[string]*http.Server{}, stopping: map[string]bool{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range f.servers {
			s.Close()
		}
	})
	return f
}

func (f *fakeControl) Submit(_ context.Context, s model.Submission) (*model.Job, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.submits++
	j := &model.Job{ID: fmt.Sprintf("j%d", f.n), Name: s.Name, Project: s.Project, Tags: s.Tags, Spec: s.Spec, State: model.JobQueued, SubmittedAt: time.Now()}
	f.jobs[j.ID] = j
	if f.hold {
		return j, true, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+s.Spec.Run.Env["PORT"])
	if err != nil {
		return nil, false, err
	}
	reply := s.Spec.Run.Env["REPLY"]
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/slow":
			time.Sleep(50 * time.Millisecond)
		case "/long": // a stream that lasts 600 ms
			for range 6 {
				fmt.Fprintf(w, "data: {}\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		}
		fmt.Fprintf(w, `{"reply":%q,"job":%q,"path":%q,"body":%q,"auth":%q,"usage":{"total_tokens":7}}`, reply, j.ID, r.URL.Path, body, r.Header.Get("Authorization"))
	})}
	go srv.Serve(ln)
	f.servers[j.ID] = srv
	j.State = model.JobRunning
	return j, true, nil
}

func (f *fakeControl) Jobs(flt model.JobFilter) []*model.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*model.Job
	for _, j := range f.jobs {
		if !j.State.Terminal() {
			c := *j
			out = append(out, &c)
		}
	}
	return out
}

func (f *fakeControl) Cancel(_ context.Context, id string) (*model.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok || j.State.Terminal() {
		return nil, model.ErrConflict
	}
	f.cancels++
	j.State = model.JobCancelled
	if s := f.servers[id]; s != nil {
		s.Close()
	}
	return j, nil
}

// crash ends a replica's process as a failure would.
func (f *fakeControl) crash(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers[id].Close()
	f.jobs[id].State = model.JobFailed
}

func (f *fakeControl) Attempts(id string) ([]*model.Attempt, error) {
	f.mu.Lock()
	start := f.jobs[id].SubmittedAt
	stop := f.stopping[id]
	ep := f.endpoint
	f.mu.Unlock()
	return []*model.Attempt{{JobID: id, State: model.AttemptRunning, StartedAt: &start, Stop: stop, Replicas: []model.Replica{{NodeID: "n1", Endpoint: ep}}}}, nil
}

// Nodes is one node with 4 GPUs at $8/hour.
func (f *fakeControl) Nodes() []model.NodeInfo {
	return []model.NodeInfo{{Node: &model.Node{ID: "n1", PricePerHour: 8, GPUs: make([]model.GPU, 4)}, Billed: model.FromDollars(8)}}
}

func (f *fakeControl) RecordEvent(_ context.Context, ev model.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

// memCommitter keeps nothing: the tests that need services to survive use
// a real store (storeCommitter).
type memCommitter struct{}

func (memCommitter) Commit(*store.Batch) func(context.Context) error {
	return func(context.Context) error { return nil }
}

// storeCommitter commits to a real store, as the controller's committer
// does.
type storeCommitter struct{ s store.Store }

func (c storeCommitter) Commit(b *store.Batch) func(context.Context) error {
	ch := c.s.Submit(b)
	return func(ctx context.Context) error {
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// storedManager builds a Manager over f and the SQLite store at path (a
// server starting, or starting again) with cfg's other fields, and
// returns it with the store.
func storedManager(t *testing.T, f *fakeControl, path string, cfg Config) (*Manager, *sqlite.Store) {
	t.Helper()
	st, stored := openStore(t, path)
	cfg.Controller, cfg.Committer, cfg.Stored = f, storeCommitter{st}, stored
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

// openStore opens the SQLite store at path and returns it with the
// services it holds.
func openStore(t *testing.T, path string) (*sqlite.Store, []*model.Service) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st, d.Services
}

// fakeKeys is a project's secrets: what the vault gives the Manager.
type fakeKeys struct {
	mu      sync.Mutex
	secrets map[[2]string]string
	made    int
}

func keysOf(testing.TB) *fakeKeys { return &fakeKeys{secrets: map[[2]string]string{}} }

func (k *fakeKeys) ServiceKey(_ context.Context, project string) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := [2]string{project, model.ServiceKeySecret}
	if _, ok := k.secrets[key]; !ok {
		k.made++
		k.secrets[key] = fmt.Sprintf("replica-key-%s-%d", project, k.made)
	}
	return k.secrets[key], nil
}

func (k *fakeKeys) Value(project, name string) (string, bool, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.secrets[[2]string{project, name}]
	return v, ok, ok
}

func (k *fakeKeys) set(project, name, value string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.secrets[[2]string{project, name}] = value
}

func testService(t testing.TB, name string, minR, maxR int) model.Service {
	s := model.Service{Name: name, Project: "default", Spec: model.ServiceSpec{
		Template:    model.JobSpec{Run: model.RunSpec{Command: []string{"serve"}, Env: map[string]string{"REPLY": "v1"}}},
		Port:        testutil.PortRun(t, 8),
		Readiness:   model.ReadinessProbe{Path: "/health", Period: model.Duration(20 * time.Millisecond)},
		Replicas:    model.ServiceReplicas{Min: minR, Max: maxR},
		Autoscaling: model.ServiceAutoscaling{Metric: model.ScaleOnInFlight, Target: 4, ScaleFromZeroTimeout: model.Duration(10 * time.Second)},
		Auth:        model.ServiceAuth{Mode: model.AuthPublic},
	}}
	s.Spec.Default()
	return s
}

func startManager(t testing.TB, f *fakeControl) (*Manager, *httptest.Server, *Metrics) {
	reg := prometheus.NewRegistry()
	met, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Controller: f, Committer: memCommitter{}, Interval: 20 * time.Millisecond, Metrics: met, StripCookies: []string{"gpufleet_session"}, Keys: keysOf(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/services/"), "/")
		m.Proxy(w, r, name, "/"+rest, func(r *http.Request, _ string) int {
			switch r.Header.Get("Authorization") {
			case "Bearer good":
				return 0
			case "Bearer other-project":
				return http.StatusForbidden
			}
			return http.StatusUnauthorized
		})
	}))
	t.Cleanup(srv.Close)
	return m, srv, met
}

func get(t *testing.T, url string, hdr ...string) (int, string) {
	t.Helper()
	code, body, _ := testutil.Call(t, "POST", url, `{"prompt":"hi"}`, hdr...)
	return code, body
}

func TestScaleFromZeroServesTheHeldRequest(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	s := testService(t, "echo", 0, 3)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if st, _ := m.Get("echo"); len(st.Replicas) != 0 {
		t.Fatalf("min 0 and no traffic: want no replica, got %+v", st.Replicas)
	}
	code, body := get(t, srv.URL+"/services/echo/v1/completions", "Cookie", "gpufleet_session=secret; theirs=1")
	if code != 200 || !strings.Contains(body, `"path":"/v1/completions"`) || !strings.Contains(body, `"body":"{\"prompt\":\"hi\"}"`) {
		t.Fatalf("held request: %d %s", code, body)
	}
	st, _ := m.Get("echo")
	if st.Ready != 1 || st.Requests != 1 || st.Tokens != 7 {
		t.Fatalf("after one request: %+v", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 || f.events[0].Kind != model.EventServiceScale {
		t.Fatalf("the scale-up was not recorded as an event: %+v", f.events)
	}
}

func TestQueueLimitAndTimeoutAnswer503(t *testing.T) {
	f := newFake(t)
	f.hold = true // replicas never start
	m, srv, _ := startManager(t, f)
	s := testService(t, "stuck", 0, 1)
	s.Spec.Autoscaling.QueueLimit = 1
	s.Spec.Autoscaling.ScaleFromZeroTimeout = model.Duration(300 * time.Millisecond)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	first := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/services/stuck/")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	time.Sleep(100 * time.Millisecond)
	resp, err := http.Get(srv.URL + "/services/stuck/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the queue limit: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code := <-first; code != 503 {
		t.Fatalf("held past scaleFromZeroTimeout: want 503, got %d", code)
	}
}

func TestTokenAuthAndStrippedCredentials(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	s := testService(t, "private", 1, 1)
	s.Spec.Auth.Mode = model.AuthToken
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, srv.URL+"/services/private/x"); code != 401 {
		t.Fatalf("no token: want 401, got %d", code)
	}
	code, body := get(t, srv.URL+"/services/private/x", "Authorization", "Bearer good")
	if code != 200 || strings.Contains(body, "good") {
		t.Fatalf("with a token: %d %s (the token must not reach the replica)", code, body)
	}
	// The replica gets its project's replica key instead, and so do its
	// probes; its job names the key so it is in the replica's environment.
	key, _, _ := m.cfg.Keys.Value("default", model.ServiceKeySecret)
	if key == "" || !strings.Contains(body, `"auth":"Bearer `+key+`"`) {
		t.Fatalf("the replica did not get the replica key %q: %s", key, body)
	}
	f.mu.Lock()
	for _, j := range f.jobs {
		if !slices.Contains(j.Spec.Run.Secrets, model.ServiceKeySecret) {
			t.Errorf("replica job %s does not name %s: %v", j.ID, model.ServiceKeySecret, j.Spec.Run.Secrets)
		}
	}
	f.mu.Unlock()
	if code, _ := get(t, srv.URL+"/services/private/x", "Authorization", "Bearer other-project"); code != 404 {
		t.Fatalf("a token without a role in the project: want 404 (as the API answers), got %d", code)
	}
	if code, _ := get(t, srv.URL+"/services/nope/x"); code != 404 {
		t.Fatalf("unknown service: %d", code)
	}
}

// TestAPIKeyAuth: an apiKey service takes the value of any of its
// secrets as a bearer token, refuses anything else (a gpufleet token
// included) with 401, and never forwards the key; naming a secret the
// project does not hold is refused when the service is applied.
func TestAPIKeyAuth(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	keys := m.cfg.Keys.(*fakeKeys)
	s := testService(t, "keyed", 1, 1)
	s.Spec.Auth = model.ServiceAuth{Mode: model.AuthAPIKey, Secrets: []string{"LLM_KEY", "LLM_KEY_NEXT"}}
	_, _, err := m.Apply(context.Background(), s)
	var fe model.FieldErrors
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "spec.auth.secrets[0]") {
		t.Fatalf("apply naming missing secrets: %v", err)
	}
	keys.set("default", "LLM_KEY", "sk-first")
	keys.set("default", "LLM_KEY_NEXT", "sk-second")
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("keyed"); return st.Ready == 1 })
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer good", 401}, {"Bearer sk-firs", 401}, {"Bearer sk-first-", 401}, {"Basic sk-first", 401},
		{"Bearer sk-first", 200}, {"bearer sk-second", 200}} {
		var hdr []string
		if c.auth != "" {
			hdr = []string{"Authorization", c.auth}
		}
		code, body := get(t, srv.URL+"/services/keyed/v1/completions", hdr...)
		if code != c.want {
			t.Errorf("Authorization %q: %d, want %d (%s)", c.auth, code, c.want, body)
		}
		if code == 200 && strings.Contains(body, "sk-") {
			t.Errorf("the API key reached the replica: %s", body)
		}
	}
}

// load sends requests from workers until stop, counting failures.
func load(t *testing.T, url string, workers int, stop <-chan struct{}) (ok, failed *atomic.Int64, wait func()) {
	ok, failed = &atomic.Int64{}, &atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(url)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	return ok, failed, wg.Wait
}

// waitFor polls cond for up to 30 s: it returns as soon as cond holds, and
// a CI machine running every package at once can be slow.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRollingUpdateAndCrashLoseNoRequest(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	s := testService(t, "roll", 2, 4)
	s.Spec.Autoscaling = model.ServiceAutoscaling{} // fixed at the target
	s.Spec.Replicas.Target = 2
	s.Spec.Default()
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 ready replicas", func() bool { st, _ := m.Get("roll"); return st.Ready == 2 })
	stop := make(chan struct{})
	ok, failed, wait := load(t, srv.URL+"/services/roll/slow", 8, stop)

	// A replica's process dies: its requests go to the other, and it is replaced.
	st, _ := m.Get("roll")
	f.crash(st.Replicas[0].Job)
	waitFor(t, "a replacement", func() bool {
		st, _ := m.Get("roll")
		f.mu.Lock()
		submits := f.submits
		f.mu.Unlock()
		return st.Ready == 2 && submits >= 3
	})

	// A rolling update to a new reply.
	s.Spec.Template.Run.Env = map[string]string{"REPLY": "v2"}
	if st, _, err := m.Apply(context.Background(), s); err != nil || st.Generation != 2 {
		t.Fatalf("apply: %v %+v", err, st.Generation)
	}
	waitFor(t, "every replica at generation 2", func() bool {
		st, _ := m.Get("roll")
		if st.Ready != 2 || len(st.Replicas) != 2 {
			return false
		}
		for _, r := range st.Replicas {
			if r.Generation != 2 {
				return false
			}
		}
		return true
	})
	close(stop)
	wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("through a crash and a rolling update: %d ok, %d failed", ok.Load(), failed.Load())
	}
	if _, body := get(t, srv.URL+"/services/roll/"); !strings.Contains(body, `"reply":"v2"`) {
		t.Fatalf("after the update: %s", body)
	}
	f.mu.Lock()
	t.Logf("%d requests, 0 failed, %d replicas submitted, %d cancelled", ok.Load(), f.submits, f.cancels)
	f.mu.Unlock()
}

// TestServicesPersistAndConflict: services are kept in the store: a new
// Manager on the reopened store (a restart, or a new leader) has them,
// and a deletion is durable too.
func TestServicesPersistAndConflict(t *testing.T) {
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	m, st := storedManager(t, f, path, Config{})
	s := testService(t, "kept", 1, 1)
	if _, created, err := m.Apply(context.Background(), s); err != nil || !created {
		t.Fatal(err, created)
	}
	if _, created, _ := m.Apply(context.Background(), s); created {
		t.Fatal("a second apply of the same spec created it again")
	}
	if st, _ := m.Get("kept"); st.Generation != 1 {
		t.Fatalf("unchanged spec bumped the generation: %d", st.Generation)
	}
	other := s
	other.Project = "other"
	if _, _, err := m.Apply(context.Background(), other); err == nil {
		t.Fatal("another project took the service's name")
	}
	gone := testService(t, "gone", 1, 1)
	if _, _, err := m.Apply(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	st.Close()

	m2, st2 := storedManager(t, f, path, Config{})
	if got, err := m2.Get("kept"); err != nil || got.Spec.Port != s.Spec.Port || got.Generation != 1 {
		t.Fatalf("reopened: %v %+v", err, got)
	}
	if _, err := m2.Get("gone"); err == nil {
		t.Fatal("a deleted service came back after a reopen")
	}
	if err := m2.Delete(context.Background(), "kept"); err != nil {
		t.Fatal(err)
	}
	st2.Close()
	if _, stored := openStore(t, path); len(stored) != 0 {
		t.Fatalf("deleted services still stored: %+v", stored)
	}
}

// TestLegacyServicesFileIsImported: an older server's services.json is
// moved into the store once, then renamed.
func TestLegacyServicesFileIsImported(t *testing.T) {
	f := newFake(t)
	dir := t.TempDir()
	legacy := filepath.Join(dir, "services.json")
	old := testService(t, "old", 1, 1)
	old.Generation = 3
	data, _ := json.Marshal([]model.Service{old})
	if err := os.WriteFile(legacy, data, 0o600); err != nil {
		t.Fatal(err)
	}
	m, st := storedManager(t, f, filepath.Join(dir, "gpufleet.db"), Config{Legacy: legacy})
	if got, err := m.Get("old"); err != nil || got.Generation != 3 {
		t.Fatalf("imported: %v %+v", err, got)
	}
	if _, err := os.Stat(legacy + ".imported"); err != nil {
		t.Fatalf("the legacy file was not renamed: %v", err)
	}
	st.Close()
	if _, stored := openStore(t, filepath.Join(dir, "gpufleet.db")); len(stored) != 1 || stored[0].Name != "old" {
		t.Fatalf("stored after the import: %+v", stored)
	}
}

// TestRestartKeepsRunningReplicas: a Manager that starts with replicas
// already running (a server restart) keeps them instead of scaling a
// min-0 service down to its minimum at once.
func TestRestartKeepsRunningReplicas(t *testing.T) {
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	m, st := storedManager(t, f, path, Config{})
	s := testService(t, "warm", 0, 3)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for slot := range 2 {
		if _, _, err := f.Submit(context.Background(), *m.submission(m.svcs["warm"], slot)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	m2, _ := storedManager(t, f, path, Config{})
	m2.Reconcile(context.Background())
	m2.Reconcile(context.Background())
	got, _ := m2.Get("warm")
	f.mu.Lock()
	cancels := f.cancels
	f.mu.Unlock()
	if got.Desired != 2 || cancels != 0 {
		t.Fatalf("after a restart with 2 replicas running: desired %d, %d cancelled", got.Desired, cancels)
	}
}

// TestForeignTaggedJobsLeaveReplicasAlone: a job of another project tagged
// with a service's name is neither adopted nor a reason to stop the
// service's own replicas.
func TestForeignTaggedJobsLeaveReplicasAlone(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "own", 1, 1)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("own"); return st.Ready == 1 })
	f.mu.Lock()
	f.n++
	f.jobs["foreign"] = &model.Job{ID: "foreign", Project: "other", State: model.JobRunning, SubmittedAt: time.Now(),
		Tags: map[string]string{model.TagService: "own", model.TagServiceSlot: "0", model.TagServiceGeneration: "1"}}
	f.mu.Unlock()
	time.Sleep(200 * time.Millisecond) // several reconciliations at 20 ms
	st, _ := m.Get("own")
	f.mu.Lock()
	cancels := f.cancels
	f.mu.Unlock()
	if st.Ready != 1 || len(st.Replicas) != 1 || st.Replicas[0].Job == "foreign" || cancels != 0 {
		t.Fatalf("a foreign tagged job changed the service: %+v, %d cancelled", st.Replicas, cancels)
	}
}

// TestCostAndUsage: a service costs its replicas' share of their nodes'
// prices per hour; its cost per million tokens is the ledger's cost over
// the tokens counted; requests and tokens are stored, so a new Manager on
// the reopened store goes on counting from them.
func TestCostAndUsage(t *testing.T) {
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	var scopes []model.BudgetScope
	var mu sync.Mutex
	ledger := func(scope model.BudgetScope, from, to time.Time) (model.Money, error) {
		mu.Lock()
		defer mu.Unlock()
		scopes = append(scopes, scope)
		return 3 * model.Dollar, nil
	}
	m, st := storedManager(t, f, path, Config{Interval: 20 * time.Millisecond, UsageEvery: time.Millisecond, Cost: ledger})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.Proxy(w, r, "paid", r.URL.Path, nil)
	}))
	defer srv.Close()
	s := testService(t, "paid", 2, 2)
	s.Spec.Autoscaling = model.ServiceAutoscaling{}
	s.Spec.Replicas.Target = 2
	s.Spec.Template.Resources.GPUs = 1
	s.Spec.Default()
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 ready replicas", func() bool { st, _ := m.Get("paid"); return st.Ready == 2 })
	for range 3 {
		if code, body := get(t, srv.URL+"/v1/completions"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	got, _ := m.Get("paid")
	perMillion := 3 * model.Dollar * 1_000_000 / 21
	// 2 replicas × 1 of 4 GPUs × $8/hour; $3 over 3 × 7 tokens.
	if got.CostPerHour != 4*model.Dollar || got.Cost != 3*model.Dollar || got.Tokens != 21 || got.Requests != 3 ||
		got.CostPerMillionTokens != perMillion {
		t.Fatalf("cost: %s/hour, %s, %d requests, %d tokens, %s per 1M", got.CostPerHour.USD(), got.Cost.USD(), got.Requests, got.Tokens, got.CostPerMillionTokens)
	}
	mu.Lock()
	if sc := scopes[len(scopes)-1]; sc.Project != "default" || sc.Tags[model.TagService] != "paid" || len(sc.Tags) != 1 {
		t.Errorf("cost scope: %+v", sc)
	}
	mu.Unlock()
	// The next reconciliations store the counts.
	waitFor(t, "the counts stored", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.svcs["paid"].svc.Tokens == 21
	})
	cancel()
	<-done
	st.Close()
	m2, _ := storedManager(t, f, path, Config{})
	if got, _ := m2.Get("paid"); got.Requests != 3 || got.Tokens != 21 {
		t.Fatalf("after a reopen: %d requests, %d tokens", got.Requests, got.Tokens)
	}
}

// TestNoticeMovesAReplica: when the controller stops a replica's attempt
// (a spot notice on its node), the replica gets no new request while its
// stream in flight finishes, and a replacement starts at once.
func TestNoticeMovesAReplica(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	s := testService(t, "mover", 2, 2)
	s.Spec.Autoscaling = model.ServiceAutoscaling{}
	s.Spec.Replicas.Target = 2
	s.Spec.Default()
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 ready replicas", func() bool { st, _ := m.Get("mover"); return st.Ready == 2 })
	// Two streams, one per replica (least outstanding).
	type answer struct {
		code int
		body string
	}
	streams := make(chan answer, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(srv.URL + "/services/mover/long")
			if err != nil {
				streams <- answer{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			streams <- answer{resp.StatusCode, string(b)}
		}()
	}
	waitFor(t, "2 streams in flight", func() bool { st, _ := m.Get("mover"); return st.InFlight == 2 })
	st, _ := m.Get("mover")
	moved := st.Replicas[0].Job
	f.mu.Lock()
	f.stopping[moved] = true
	f.mu.Unlock()
	waitFor(t, "the replica draining", func() bool {
		st, _ := m.Get("mover")
		for _, r := range st.Replicas {
			if r.Job == moved {
				return r.State == model.ReplicaDraining
			}
		}
		return false
	})
	for range 20 {
		if _, body := get(t, srv.URL+"/services/mover/x"); strings.Contains(body, `"job":"`+moved+`"`) {
			t.Fatalf("a new request went to the moving replica: %s", body)
		}
	}
	for range 2 {
		if a := <-streams; a.code != 200 || strings.Count(a.body, "data: ") != 6 {
			t.Fatalf("a stream in flight: %d %q", a.code, a.body)
		}
	}
	waitFor(t, "a replacement", func() bool {
		st, _ := m.Get("mover")
		return st.Ready == 2 && len(st.Replicas) == 3
	})
}

// TestOnDemandShare: the share of replicas asked for runs on on-demand
// capacity; the others keep the template's spot policy.
func TestOnDemandShare(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "mixed", 3, 3)
	s.Spec.Autoscaling = model.ServiceAutoscaling{}
	s.Spec.Replicas.Target = 3
	s.Spec.Replicas.OnDemandShare = 0.5
	s.Spec.Template.Spot = model.SpotAllowed
	s.Spec.Default()
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 ready replicas", func() bool { st, _ := m.Get("mixed"); return st.Ready == 3 })
	f.mu.Lock()
	defer f.mu.Unlock()
	count := map[model.SpotPolicy]int{}
	for _, j := range f.jobs {
		count[j.Spec.Spot]++
	}
	if count[model.SpotNever] != 2 || count[model.SpotAllowed] != 1 {
		t.Fatalf("spot policies of 3 replicas at onDemandShare 0.5: %v", count)
	}
}

// TestP95LatencyScalesTheService: with metric p95, the proxy's own time
// to first byte drives the count. A replica that takes 50 ms against a
// 20 ms target is 2.5× over: one ready replica becomes three (max), the
// decision says why, and the service reports the p95 it read.
func TestP95LatencyScalesTheService(t *testing.T) {
	f := newFake(t)
	m, srv, _ := startManager(t, f)
	s := testService(t, "lat", 1, 3)
	s.Spec.Autoscaling.Metric, s.Spec.Autoscaling.Target = model.ScaleOnLatency, 0.02
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("lat"); return st.Ready == 1 })
	if st, _ := m.Get("lat"); st.Desired != 1 {
		t.Fatalf("before any request: desired %d", st.Desired)
	}
	stop := make(chan struct{})
	ok, failed, wait := load(t, srv.URL+"/services/lat/slow", 2, stop)
	defer func() { close(stop); wait() }()
	waitFor(t, "3 replicas asked for", func() bool { st, _ := m.Get("lat"); return st.Desired == 3 })
	st, _ := m.Get("lat")
	if st.Load.LatencySamples < minLatencySamples || st.Load.P95Seconds < 0.04 {
		t.Fatalf("load read: %+v", st.Load)
	}
	last := st.Decisions[len(st.Decisions)-1]
	if !strings.Contains(last.Message, "p95 latency") || !strings.Contains(last.Message, "over target 20ms") {
		t.Fatalf("the decision's reason: %q", last.Message)
	}
	if ok.Load() == 0 || failed.Load() != 0 {
		t.Fatalf("load: %d ok, %d failed", ok.Load(), failed.Load())
	}
}

// TestReplicaEndpointIsDialed: a replica whose runner reports an endpoint
// (a Kubernetes Service) is probed and proxied there, not at its node's
// address and port.
func TestReplicaEndpointIsDialed(t *testing.T) {
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"via":"endpoint","path":%q}`, r.URL.Path)
	}))
	defer front.Close()
	f := newFake(t)
	f.endpoint = strings.TrimPrefix(front.URL, "http://")
	m, srv, _ := startManager(t, f)
	s := testService(t, "kube", 1, 1)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("kube"); return st.Ready == 1 })
	if st, _ := m.Get("kube"); st.Replicas[0].Address != f.endpoint {
		t.Fatalf("replica address %q, want the endpoint %q", st.Replicas[0].Address, f.endpoint)
	}
	if code, body := get(t, srv.URL+"/services/kube/v1/completions"); code != 200 || body != `{"via":"endpoint","path":"/v1/completions"}` {
		t.Fatalf("proxied: %d %s", code, body)
	}
}
