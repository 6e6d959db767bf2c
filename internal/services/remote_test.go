package services

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
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

// askServer is a server for caller checks alone: it lets in the digests
// in allow (nil: every caller) and refuses the others with 401, counting
// the questions per digest and the most in flight at once; with hold
// set, each question waits until hold closes.
type askServer struct {
	allow map[[sha256.Size]byte]bool
	hold  chan struct{}
	fail  error // with mu: each question's error, when set

	mu       sync.Mutex
	per      map[[sha256.Size]byte]int
	asked    int
	inFlight int
	peak     int
}

func (a *askServer) ProxyEndpoints(ctx context.Context, _ uint64) (model.ProxyTable, error) {
	<-ctx.Done()
	return model.ProxyTable{}, ctx.Err()
}
func (a *askServer) ProxyLoad(context.Context, model.ProxyReport) error { return nil }
func (a *askServer) ProxyAuthorize(ctx context.Context, _ string, digest []byte) (int, error) {
	d := [sha256.Size]byte(digest)
	a.mu.Lock()
	if a.per == nil {
		a.per = map[[sha256.Size]byte]int{}
	}
	a.per[d]++
	a.asked++
	a.inFlight++
	a.peak = max(a.peak, a.inFlight)
	yes := a.allow == nil || a.allow[d]
	fail := a.fail
	a.mu.Unlock()
	defer func() { a.mu.Lock(); a.inFlight--; a.mu.Unlock() }()
	if a.hold != nil {
		select {
		case <-a.hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if fail != nil {
		return 0, fail
	}
	if yes {
		return 0, nil
	}
	return http.StatusUnauthorized, nil
}

// counts returns the questions about token, all questions, and the most
// in flight at once.
func (a *askServer) counts(token string) (perToken, asked, peak int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.per[sha256.Sum256([]byte(token))], a.asked, a.peak
}

// check asks r whether token may call rt.
func check(r *Remote, rt *model.ProxyRoute, token string) int {
	req := httptest.NewRequest("GET", "/services/"+rt.Name+"/x", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return r.authorize(req, rt)
}

// checkAll checks tokens at once, each from its own goroutine, while srv
// holds every question; once all have started and srv has settled (as
// many questions in flight as it will get: want, then 200 ms more) it
// lets them through. Each must be let in.
func checkAll(t *testing.T, r *Remote, srv *askServer, tokens []string, want int) {
	t.Helper()
	srv.hold = make(chan struct{})
	got := make([]int, len(tokens))
	var wg sync.WaitGroup
	for i, tok := range tokens {
		wg.Go(func() { got[i] = check(r, llm, tok) })
	}
	waitFor(t, "the questions in flight", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.inFlight >= want
	})
	time.Sleep(200 * time.Millisecond) // room for the questions a bug would add
	close(srv.hold)
	wg.Wait()
	if i := slices.IndexFunc(got, func(s int) bool { return s != 0 }); i >= 0 {
		t.Fatalf("%s: %d", tokens[i], got[i])
	}
}

// llm is the route of the caller checks below.
var llm = &model.ProxyRoute{Name: "llm", Project: "default"}

// TestRemoteAuthCacheIsPerProject: a yes is remembered for the service it
// was given for, by name and project: a service of the same name made
// again in another project asks the server afresh.
func TestRemoteAuthCacheIsPerProject(t *testing.T) {
	srv := &askServer{}
	r := NewRemote(RemoteConfig{Server: srv})
	a := &model.ProxyRoute{Name: "llm", Project: "team-a"}
	b := &model.ProxyRoute{Name: "llm", Project: "team-b"}
	for _, rt := range []*model.ProxyRoute{a, a, b, b} {
		if got := check(r, rt, "tok"); got != 0 {
			t.Fatalf("%s/%s: %d", rt.Project, rt.Name, got)
		}
	}
	if _, n, _ := srv.counts(""); n != 2 {
		t.Errorf("the server was asked %d times, want 2 (once per project)", n)
	}
}

// TestRemoteAuthAsksOncePerToken: 100 requests that arrive together with
// a token the proxy has not seen make one question to the server, and
// all get its answer.
func TestRemoteAuthAsksOncePerToken(t *testing.T) {
	srv := &askServer{}
	checkAll(t, NewRemote(RemoteConfig{Server: srv}), srv, slices.Repeat([]string{"new-token"}, 100), 1)
	if _, n, _ := srv.counts(""); n != 1 {
		t.Errorf("100 concurrent first requests asked the server %d times, want 1", n)
	}
}

// TestRemoteAuthBoundsQuestionsInFlight: distinct unknown tokens at once
// (a client spraying made-up ones) have at most maxAsking questions in
// flight to the server; the rest wait their turn and are answered.
func TestRemoteAuthBoundsQuestionsInFlight(t *testing.T) {
	tokens := make([]string, 3*maxAsking)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("token-%d", i)
	}
	srv := &askServer{}
	checkAll(t, NewRemote(RemoteConfig{Server: srv}), srv, tokens, maxAsking)
	if _, n, peak := srv.counts(""); n != len(tokens) || peak > maxAsking {
		t.Errorf("%d questions, at most %d in flight; want %d, at most %d", n, peak, len(tokens), maxAsking)
	}
}

// TestRemoteAuthFloodLeavesKnownCallers: while maxAsking questions about
// made-up tokens hang at the server, a caller the proxy already let in is
// answered from the cache, and one more made-up token gets 503 once it
// has waited turnWait for a turn, without reaching the server.
func TestRemoteAuthFloodLeavesKnownCallers(t *testing.T) {
	srv := &askServer{}
	r := NewRemote(RemoteConfig{Server: srv})
	r.turnWait = 200 * time.Millisecond
	if got := check(r, llm, "known"); got != 0 {
		t.Fatalf("known: %d", got)
	}
	srv.hold = make(chan struct{})
	var wg sync.WaitGroup
	for i := range maxAsking {
		wg.Go(func() { check(r, llm, fmt.Sprintf("flood-%d", i)) })
	}
	waitFor(t, "the flood's questions in flight", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.inFlight == maxAsking
	})
	if got := check(r, llm, "known"); got != 0 {
		t.Errorf("a known caller during the flood: %d", got)
	}
	if got := check(r, llm, "one-more"); got != http.StatusServiceUnavailable {
		t.Errorf("a made-up token past the bound: %d, want 503", got)
	}
	if n, _, _ := srv.counts("one-more"); n != 0 {
		t.Errorf("the token past the bound reached the server %d times", n)
	}
	close(srv.hold)
	wg.Wait()
}

// TestRemoteAuthSprayKeepsCallersLetIn: 20,000 made-up tokens, each
// refused, push no caller that was let in out of the cache (it is not
// asked about again), the refusals kept stay bounded, and a refused token
// sent again is refused from the cache.
func TestRemoteAuthSprayKeepsCallersLetIn(t *testing.T) {
	srv := &askServer{allow: map[[sha256.Size]byte]bool{sha256.Sum256([]byte("good")): true}}
	// A still clock: the TTLs are not what this measures.
	r := NewRemote(RemoteConfig{Server: srv, Clock: clock.NewFake(time.Unix(1_700_000_000, 0))})
	if got := check(r, llm, "good"); got != 0 {
		t.Fatalf("good: %d", got)
	}
	for i := range 20000 {
		if got := check(r, llm, fmt.Sprintf("guess-%d", i)); got != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, got)
		}
	}
	if got := check(r, llm, "good"); got != 0 {
		t.Fatalf("good after the spray: %d", got)
	}
	if n, _, _ := srv.counts("good"); n != 1 {
		t.Errorf("the caller let in was asked about %d times, want 1: the spray evicted it", n)
	}
	if yes, no := r.callers.sizes(); yes != 1 || no > maxRefusals {
		t.Errorf("cache holds %d yeses and %d refusals, want 1 and at most %d", yes, no, maxRefusals)
	}
	last := "guess-19999"
	if got := check(r, llm, last); got != http.StatusUnauthorized {
		t.Fatalf("%s again: %d", last, got)
	}
	if n, _, _ := srv.counts(last); n != 1 {
		t.Errorf("a refused token sent again was asked about %d times, want 1", n)
	}
}

// TestRemoteAuthEvictsLeastRecentlyUsed: past its bound, the cache of
// callers let in forgets the one least recently used, not everyone: a
// caller in steady use among many others is asked about once.
func TestRemoteAuthEvictsLeastRecentlyUsed(t *testing.T) {
	srv := &askServer{}
	r := NewRemote(RemoteConfig{Server: srv, Clock: clock.NewFake(time.Unix(1_700_000_000, 0))})
	r.callers = newCallerCache(100, 10, 0)
	for i := range 1000 {
		if i%50 == 0 && check(r, llm, "steady") != 0 {
			t.Fatal("steady refused")
		}
		if got := check(r, llm, fmt.Sprintf("caller-%d", i)); got != 0 {
			t.Fatalf("caller %d: %d", i, got)
		}
	}
	if n, _, _ := srv.counts("steady"); n != 1 {
		t.Errorf("the caller in steady use was asked about %d times, want 1", n)
	}
	if yes, _ := r.callers.sizes(); yes != 100 {
		t.Errorf("%d yeses kept, want the bound, 100", yes)
	}
	if n, _, _ := srv.counts("caller-0"); n != 1 || check(r, llm, "caller-0") != 0 {
		t.Fatal("caller-0")
	}
	if n, _, _ := srv.counts("caller-0"); n != 2 {
		t.Errorf("the least recently used caller was not evicted (asked %d times, want 2)", n)
	}
}

// TestRemoteAuthVerdictsExpire: a yes is remembered for AuthTTL, a
// refusal for a fifth of it; a token refused once its yes expired (one
// revoked) is refused from then on.
func TestRemoteAuthVerdictsExpire(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := &askServer{allow: map[[sha256.Size]byte]bool{sha256.Sum256([]byte("tok")): true}}
	r := NewRemote(RemoteConfig{Server: srv, Clock: clk, AuthTTL: 10 * time.Second})
	asks := func(token string) int { n, _, _ := srv.counts(token); return n }
	check(r, llm, "tok")
	check(r, llm, "bad")
	clk.Advance(2*time.Second - time.Millisecond)
	check(r, llm, "tok")
	check(r, llm, "bad")
	if asks("tok") != 1 || asks("bad") != 1 {
		t.Fatalf("within the TTLs: asked %d and %d times, want 1 and 1", asks("tok"), asks("bad"))
	}
	clk.Advance(time.Millisecond)
	check(r, llm, "bad")
	if asks("bad") != 2 {
		t.Errorf("a refusal was kept past a fifth of the TTL")
	}
	clk.Advance(8*time.Second - time.Millisecond)
	check(r, llm, "tok")
	if asks("tok") != 1 {
		t.Fatalf("a yes was asked about again within the TTL")
	}
	clk.Advance(time.Millisecond)
	if got := check(r, llm, "tok"); got != 0 {
		t.Fatalf("a yes just expired: %d, want it served while asked again", got)
	}
	waitRechecked(t, r, srv, "tok", 2)
}

// revoke makes srv refuse every caller from now on.
func (a *askServer) revoke() {
	a.mu.Lock()
	a.allow = map[[sha256.Size]byte]bool{}
	a.mu.Unlock()
}

// waitRechecked waits until srv was asked about token n times and r has
// no check again in flight.
func waitRechecked(t *testing.T, r *Remote, srv *askServer, token string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s asked about %d times", token, n), func() bool {
		got, _, _ := srv.counts(token)
		r.recheckMu.Lock()
		defer r.recheckMu.Unlock()
		return got >= n && len(r.rechecking) == 0
	})
	if got, _, _ := srv.counts(token); got != n {
		t.Fatalf("%s asked about %d times, want %d", token, got, n)
	}
}

// TestRemoteAuthRevokedStopsWithinBound: a token revoked is let in from
// its expired yes while the server is asked again, refused as soon as the
// server says no, and, with the server unreachable, let in no longer than
// 2×AuthTTL after the yes was asked for.
func TestRemoteAuthRevokedStopsWithinBound(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := &askServer{allow: map[[sha256.Size]byte]bool{
		sha256.Sum256([]byte("tok")): true, sha256.Sum256([]byte("cut-off")): true}}
	r := NewRemote(RemoteConfig{Server: srv, Clock: clk, AuthTTL: 10 * time.Second})
	if check(r, llm, "tok") != 0 || check(r, llm, "cut-off") != 0 {
		t.Fatal("refused before the revocation")
	}
	srv.revoke()
	clk.Advance(10*time.Second + time.Millisecond)
	if got := check(r, llm, "tok"); got != 0 {
		t.Fatalf("an expired yes: %d, want it served while asked again", got)
	}
	waitRechecked(t, r, srv, "tok", 2)
	for range 3 {
		if got := check(r, llm, "tok"); got != http.StatusUnauthorized {
			t.Fatalf("a revoked token once the server said no: %d", got)
		}
	}
	if n, _, _ := srv.counts("tok"); n != 2 {
		t.Errorf("the refusal was not remembered: asked %d times", n)
	}

	// With the server failing, the stale yes runs out at 2×AuthTTL.
	srv.mu.Lock()
	srv.fail = errors.New("server down")
	srv.mu.Unlock()
	if got := check(r, llm, "cut-off"); got != 0 {
		t.Fatalf("an expired yes, server down: %d", got)
	}
	waitRechecked(t, r, srv, "cut-off", 2)
	clk.Advance(10*time.Second - 2*time.Millisecond) // 2×AuthTTL − 1 ms after the yes
	if got := check(r, llm, "cut-off"); got != 0 {
		t.Fatalf("a stale yes within 2×AuthTTL: %d", got)
	}
	waitRechecked(t, r, srv, "cut-off", 3)
	clk.Advance(time.Millisecond)
	if got := check(r, llm, "cut-off"); got != http.StatusServiceUnavailable {
		t.Fatalf("a yes 2×AuthTTL old with the server down: %d, want 503", got)
	}
	srv.mu.Lock()
	srv.fail = nil
	srv.mu.Unlock()
	if got := check(r, llm, "cut-off"); got != http.StatusUnauthorized {
		t.Fatalf("the revoked token once the server answers: %d", got)
	}
}

// flood checks n made-up tokens at once from their own goroutines and
// returns a wait for them all, counting those done and those refused 503.
func flood(r *Remote, n int, done, busy *atomic.Int64) func() {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if check(r, llm, fmt.Sprintf("flood-%d", i)) == http.StatusServiceUnavailable {
				busy.Add(1)
			}
			done.Add(1)
		})
	}
	return wg.Wait
}

// TestRemoteAuthFloodKeepsExpiredCallersIn: while made-up tokens hold
// every turn and fill the queue for one, a caller let in whose yes just
// expired is still let in at once, and it is asked about again on turns
// of its own.
func TestRemoteAuthFloodKeepsExpiredCallersIn(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := &askServer{}
	r := NewRemote(RemoteConfig{Server: srv, Clock: clk, AuthTTL: 10 * time.Second})
	r.turnWait = time.Hour // the flood waits for its turns throughout
	if got := check(r, llm, "known"); got != 0 {
		t.Fatalf("known: %d", got)
	}
	srv.hold = make(chan struct{})
	var done, busy atomic.Int64
	wait := flood(r, maxAsking+maxWaiting, &done, &busy)
	waitFor(t, "the flood holding every turn and the queue", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.inFlight == maxAsking && r.waiting.Load() == maxWaiting
	})
	clk.Advance(10*time.Second + time.Millisecond)
	got := make(chan int, 1)
	go func() { got <- check(r, llm, "known") }()
	select {
	case code := <-got:
		if code != 0 {
			t.Errorf("a known caller whose yes expired, during the flood: %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a known caller whose yes expired waited behind the flood")
	}
	waitFor(t, "the known caller asked about again during the flood", func() bool {
		n, _, _ := srv.counts("known")
		return n == 2
	})
	close(srv.hold)
	wait()
	waitRechecked(t, r, srv, "known", 2)
	if _, stale, ok := r.callers.get(authKey{service: llm.Name, project: llm.Project, digest: sha256.Sum256([]byte("known"))}, clk.Now()); !ok || stale {
		t.Errorf("the check again did not renew the yes (remembered %v, stale %v)", ok, stale)
	}
	if busy.Load() != 0 {
		t.Errorf("%d of the flood within the bounds were refused", busy.Load())
	}
}

// TestRemoteAuthFloodParksBoundedGoroutines: a flood of made-up tokens
// past maxAsking in flight and maxWaiting waiting is refused 503 at once,
// so the goroutines parked stay bounded whatever the flood's size.
func TestRemoteAuthFloodParksBoundedGoroutines(t *testing.T) {
	srv := &askServer{hold: make(chan struct{})}
	r := NewRemote(RemoteConfig{Server: srv})
	r.turnWait = time.Minute
	const n = 2000
	base := runtime.NumGoroutine()
	var done, busy atomic.Int64
	wait := flood(r, n, &done, &busy)
	refused := int64(n - maxAsking - maxWaiting)
	waitFor(t, "the flood past the bounds refused", func() bool { return done.Load() >= refused })
	// Parked: each request in flight or waiting, and its question.
	parked := runtime.NumGoroutine() - base
	if limit := 2*(maxAsking+maxWaiting) + 50; parked > limit {
		t.Errorf("%d goroutines parked under a flood of %d, want at most %d", parked, n, limit)
	}
	if busy.Load() != refused {
		t.Errorf("%d refused 503, want %d", busy.Load(), refused)
	}
	if _, asked, peak := srv.counts(""); asked != maxAsking || peak > maxAsking {
		t.Errorf("%d questions reached the server, %d at once; want %d", asked, peak, maxAsking)
	}
	close(srv.hold)
	wait()
}
