package services

import (
	"bufio"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// directServer is the server's side of a separate proxy without the HTTP
// in between: the Manager's Endpoints, Report and AuthorizeDigest, as the
// API's proxy routes call them.
type directServer struct {
	m       *Manager
	reports atomic.Int64
	asked   atomic.Int64
}

func (d *directServer) ProxyEndpoints(ctx context.Context, after uint64) (model.ProxyTable, error) {
	return d.m.Endpoints(ctx, after), nil
}

func (d *directServer) ProxyLoad(_ context.Context, r model.ProxyReport) error {
	d.reports.Add(1)
	r.Proxy = "edge-1"
	d.m.Report(r)
	return nil
}

// ProxyAuthorize lets in the user token "good" (any project) and refuses
// "elsewhere" as a token without a role there.
func (d *directServer) ProxyAuthorize(_ context.Context, service string, digest []byte) (int, error) {
	d.asked.Add(1)
	return d.m.AuthorizeDigest(service, digest, func(digest []byte, _ string) int {
		switch [sha256.Size]byte(digest) {
		case sha256.Sum256([]byte("good")):
			return 0
		case sha256.Sum256([]byte("elsewhere")):
			return http.StatusNotFound
		}
		return http.StatusUnauthorized
	}), nil
}

func startRemote(t *testing.T, m *Manager) (*directServer, *httptest.Server) {
	d := &directServer{m: m}
	r := NewRemote(RemoteConfig{Server: d, ReportEvery: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	srv := httptest.NewServer(r)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	waitFor(t, "the proxy ready", func() bool { return r.ready.Load() })
	return d, srv
}

// TestRemoteProxyScalesFromZero: a request to a separate proxy for a
// service with no replica is held; the proxy's report of it makes the
// server's autoscaler start one; the endpoint watch brings it to the
// proxy, which serves the request. The proxy's requests count on the
// server.
func TestRemoteProxyScalesFromZero(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "edge", 0, 2)
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	_, srv := startRemote(t, m)
	code, body := get(t, srv.URL+"/services/edge/v1/completions")
	if code != 200 || !strings.Contains(body, `"path":"/v1/completions"`) || !strings.Contains(body, `"auth":"Bearer replica-key-default-1"`) {
		t.Fatalf("held request through the proxy: %d %s", code, body)
	}
	waitFor(t, "the proxy's request and tokens counted on the server", func() bool {
		st, _ := m.Get("edge")
		return st.Requests == 1 && st.Tokens == 7
	})
	st, _ := m.Get("edge")
	if len(st.Decisions) == 0 || !strings.Contains(st.Decisions[0].Message, "scale from zero") {
		t.Fatalf("no scale-from-zero decision: %+v", st.Decisions)
	}
}

// TestRemoteProxyLoadDrivesTheAutoscaler: streams in flight on a separate
// proxy count in the server's load (in flight per replica too) and scale
// the service up; Server-Sent Events pass the proxy unbuffered.
func TestRemoteProxyLoadDrivesTheAutoscaler(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "busy", 1, 3)
	s.Spec.Autoscaling.Target = 1
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("busy"); return st.Ready == 1 })
	_, srv := startRemote(t, m)
	resp, err := http.Get(srv.URL + "/services/busy/long")
	if err != nil {
		t.Fatal(err)
	}
	// The replica sends an event every 100 ms: unbuffered, the first
	// reaches the client well before the last.
	var at []time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			at = append(at, time.Now())
		}
	}
	resp.Body.Close()
	if len(at) != 6 || at[5].Sub(at[0]) < 300*time.Millisecond {
		t.Fatalf("%d events, %v from the first to the last: the proxy buffered the stream", len(at), at[len(at)-1].Sub(at[0]))
	}
	stop := make(chan struct{})
	defer close(stop)
	streams := func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r, err := http.Get(srv.URL + "/services/busy/long"); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}
	}
	go streams()
	waitFor(t, "the proxy's stream in the server's load", func() bool {
		st, _ := m.Get("busy")
		for _, r := range st.Replicas {
			if r.InFlight >= 1 && st.InFlight >= 1 {
				return true
			}
		}
		return false
	})
	// Three streams at a target of 1 per replica ask for 3 replicas.
	go streams()
	go streams()
	waitFor(t, "scaled up on the proxy's load", func() bool { st, _ := m.Get("busy"); return st.Desired >= 2 })
}

func TestRemoteProxyAuth(t *testing.T) {
	f := newFake(t)
	m, _, _ := startManager(t, f)
	s := testService(t, "private", 1, 1)
	s.Spec.Auth = model.ServiceAuth{Mode: model.AuthToken}
	if _, _, err := m.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { st, _ := m.Get("private"); return st.Ready == 1 })
	d, srv := startRemote(t, m)
	for _, tc := range []struct {
		auth string
		code int
	}{{"", 401}, {"Bearer bad", 401}, {"Bearer elsewhere", 404}, {"Bearer good", 200}} {
		code, body := get(t, srv.URL+"/services/private/x", "Authorization", tc.auth)
		if code != tc.code {
			t.Errorf("%q: %d %s", tc.auth, code, body)
		}
		if code == 200 && strings.Contains(body, "good") {
			t.Errorf("the caller's token reached the replica: %s", body)
		}
	}
	asked := d.asked.Load()
	for range 5 {
		if code, _ := get(t, srv.URL+"/services/private/x", "Authorization", "Bearer good"); code != 200 {
			t.Fatal(code)
		}
	}
	if d.asked.Load() != asked {
		t.Errorf("a caller let in was asked about again within the cache's TTL: %d → %d", asked, d.asked.Load())
	}
	// API keys are checked by the server too, by digest.
	keys := m.cfg.Keys.(*fakeKeys)
	keys.set("default", "EDGE_KEY", "k-123")
	k := testService(t, "keyed", 1, 1)
	k.Spec.Auth = model.ServiceAuth{Mode: model.AuthAPIKey, Secrets: []string{"EDGE_KEY"}}
	if _, _, err := m.Apply(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the keyed service at the proxy", func() bool {
		c, _ := get(t, srv.URL+"/services/keyed/x", "Authorization", "Bearer k-123")
		return c == 200
	})
	if code, _ := get(t, srv.URL+"/services/keyed/x", "Authorization", "Bearer good"); code != 401 {
		t.Errorf("a user token on an apiKey service: %d", code)
	}
}

// countingServer answers every caller check with yes and counts them.
type countingServer struct{ asked atomic.Int64 }

func (c *countingServer) ProxyEndpoints(ctx context.Context, _ uint64) (model.ProxyTable, error) {
	<-ctx.Done()
	return model.ProxyTable{}, ctx.Err()
}
func (c *countingServer) ProxyLoad(context.Context, model.ProxyReport) error { return nil }
func (c *countingServer) ProxyAuthorize(context.Context, string, []byte) (int, error) {
	c.asked.Add(1)
	return 0, nil
}

// TestRemoteAuthCacheIsPerProject: a yes is remembered for the service it
// was given for, by name and project: a service of the same name made
// again in another project asks the server afresh.
func TestRemoteAuthCacheIsPerProject(t *testing.T) {
	srv := &countingServer{}
	r := NewRemote(RemoteConfig{Server: srv})
	req := httptest.NewRequest("GET", "/services/llm/x", nil)
	req.Header.Set("Authorization", "Bearer tok")
	a := &model.ProxyRoute{Name: "llm", Project: "team-a"}
	b := &model.ProxyRoute{Name: "llm", Project: "team-b"}
	for _, rt := range []*model.ProxyRoute{a, a, b, b} {
		if got := r.authorize(req, rt); got != 0 {
			t.Fatalf("%s/%s: %d", rt.Project, rt.Name, got)
		}
	}
	if n := srv.asked.Load(); n != 2 {
		t.Errorf("the server was asked %d times, want 2 (once per project)", n)
	}
}
