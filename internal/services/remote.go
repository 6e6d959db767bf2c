package services

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Server is what a separate proxy needs of the gpufleet server: the API's
// proxy routes, called with a proxy token (package client).
type Server interface {
	// ProxyEndpoints returns the table at once when its version is not
	// after, else once it changes (or the server's wait ends).
	ProxyEndpoints(ctx context.Context, after uint64) (model.ProxyTable, error)
	// ProxyLoad reports the proxy's load.
	ProxyLoad(ctx context.Context, r model.ProxyReport) error
	// ProxyAuthorize says whether the caller whose bearer secret has
	// SHA-256 digest may call service (0), or the status to refuse with.
	ProxyAuthorize(ctx context.Context, service string, digest []byte) (int, error)
}

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	Server Server // required
	Clock  clock.Clock
	Log    *slog.Logger
	// Metrics receives the proxy's request, latency and token series.
	Metrics *Metrics
	// StripCookies and Reserved are as in ProxyConfig.
	StripCookies []string
	Reserved     []string
	// ReportEvery is how often the load is reported (1 s); a request
	// held for a replica, or one that failed, is reported at once.
	ReportEvery time.Duration
	// AuthTTL is how long a caller the server let in is let in again
	// without asking (10 s); for one more AuthTTL it is let in while
	// asked again in the background, so a revoked token is let in at most
	// 2×AuthTTL after the server last said yes. A refusal is remembered
	// for a fifth of it.
	AuthTTL time.Duration
}

// Remote is a separate `gpufleet proxy`: the same Proxy the server runs,
// routing by the server's endpoint list, which it watches, and reporting
// its load to the server, whose autoscaler adds it to its own proxy's.
type Remote struct {
	cfg    RemoteConfig
	proxy  *Proxy
	demand chan struct{}
	ready  atomic.Bool
	// instance tells this process's load reports from those of other
	// proxies that share its token (several replicas of one Deployment).
	instance string

	// callers remembers the server's verdicts on callers; flight makes
	// concurrent first requests with one caller's token one question;
	// asking bounds the questions about callers not remembered in flight
	// (maxAsking); a question waits turnWait at most for a turn, and
	// waiting counts those waiting (maxWaiting at most). rechecks bounds
	// the questions about callers let in whose yes expired (maxRechecks,
	// turns of their own), rechecking those in flight, one per caller.
	callers    *callerCache
	flight     singleflight.Group
	asking     chan struct{}
	turnWait   time.Duration
	waiting    atomic.Int64
	rechecks   chan struct{}
	recheckMu  sync.Mutex
	rechecking map[authKey]bool
}

// authKey is a caller's verdict's key: the service by name and project (a
// service deleted and made again elsewhere under its name is not the one
// a remembered yes was for) and the caller's bearer digest.
type authKey struct {
	service, project string
	digest           [sha256.Size]byte
}

type verdict struct {
	status int
	until  time.Time
}

// flightKey names k in Remote.flight.
func (k authKey) flightKey() string {
	return k.service + "\x00" + k.project + "\x00" + string(k.digest[:])
}

// maxAsking bounds the checks of callers not remembered that a separate
// proxy has in flight to the server: a client spraying made-up tokens,
// each a question, waits behind it rather than loading the server with
// one per request. A check waits at most turnWait for a turn, with at
// most maxWaiting waiting (past that a check is refused at once), then
// askTimeout for the server's answer. Callers let in whose yes expired
// are checked again with maxRechecks turns of their own, which a flood
// of made-up tokens cannot take.
const (
	maxAsking   = 32
	maxWaiting  = 64
	maxRechecks = 4
	turnWait    = 10 * time.Second
	askTimeout  = 10 * time.Second
)

// errBusy is a caller check that found no turn: within turnWait, or at
// once with maxWaiting already waiting.
var errBusy = errors.New("too many caller checks in flight to the server")

// NewRemote returns a proxy that routes nothing until Run has read the
// endpoint list once.
func NewRemote(cfg RemoteConfig) *Remote {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = time.Second
	}
	if cfg.AuthTTL == 0 {
		cfg.AuthTTL = 10 * time.Second
	}
	r := &Remote{cfg: cfg, demand: make(chan struct{}, 1), instance: rand.Text()[:16],
		callers: newCallerCache(maxAuthCache, maxRefusals, cfg.AuthTTL), asking: make(chan struct{}, maxAsking), turnWait: turnWait,
		rechecks: make(chan struct{}, maxRechecks), rechecking: map[authKey]bool{}}
	r.proxy = NewProxy(ProxyConfig{Clock: cfg.Clock, Metrics: cfg.Metrics, StripCookies: cfg.StripCookies, Reserved: cfg.Reserved,
		KeyOK:  func(req *http.Request, rt *model.ProxyRoute) bool { return r.authorize(req, rt) == 0 },
		Demand: func(string) { r.poke() },
		Failed: func(string, string) { r.poke() }})
	return r
}

func (r *Remote) poke() {
	select {
	case r.demand <- struct{}{}:
	default:
	}
}

// Run follows the endpoint list and reports the load until ctx ends.
func (r *Remote) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.follow(ctx) }()
	go func() { defer wg.Done(); r.report(ctx) }()
	wg.Wait()
	return nil
}

// follow watches the endpoint list. While the server cannot be reached
// the proxy keeps routing by the last table it read.
func (r *Remote) follow(ctx context.Context) {
	var after uint64
	for ctx.Err() == nil {
		t, err := r.cfg.Server.ProxyEndpoints(ctx, after)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("reading the services' endpoints; routing by the last table read", "err", err)
				select {
				case <-ctx.Done():
				case <-r.cfg.Clock.After(time.Second):
				}
			}
			continue
		}
		if t.Version != after {
			r.proxy.Set(t)
			after = t.Version
			if !r.ready.Swap(true) {
				r.cfg.Log.Info("routing by the server's endpoint list", "services", len(t.Services), "version", t.Version)
			}
		}
	}
}

// report sends the load every ReportEvery, and at once on demand. Counts
// a failed report did not deliver are sent with the next.
func (r *Remote) report(ctx context.Context) {
	t := r.cfg.Clock.NewTicker(r.cfg.ReportEvery)
	defer t.Stop()
	unsent := map[string]model.ProxyLoad{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-r.demand:
		}
		loads := r.proxy.Take()
		for name, u := range unsent {
			l := loads[name]
			l.Requests += u.Requests
			l.Tokens += u.Tokens
			l.Failed = append(l.Failed, u.Failed...)
			loads[name] = l
		}
		if err := r.cfg.Server.ProxyLoad(ctx, model.ProxyReport{Proxy: r.instance, Services: loads}); err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("reporting the proxy's load", "err", err)
			}
			clear(unsent)
			for name, l := range loads {
				if l.Requests != 0 || l.Tokens != 0 || len(l.Failed) > 0 {
					unsent[name] = model.ProxyLoad{Requests: l.Requests, Tokens: l.Tokens, Failed: l.Failed}
				}
			}
			continue
		}
		clear(unsent)
	}
}

// authorize says whether req's bearer may call rt's service (0), or the
// status to refuse with. A verdict is remembered (callerCache: AuthTTL, a
// fifth of it for a refusal); on a miss, the server is asked once however
// many requests with the same token arrive meanwhile. A yes expired less
// than AuthTTL ago still lets the caller in while one question in the
// background (recheck) asks again: a token revoked is let in at most
// 2×AuthTTL after the server last said yes. The server sees the secret's
// SHA-256, never the secret. A server it cannot ask answers 503.
func (r *Remote) authorize(req *http.Request, rt *model.ProxyRoute) int {
	secret, ok := bearer(req.Header.Get("Authorization"))
	if !ok {
		return http.StatusUnauthorized
	}
	k := authKey{service: rt.Name, project: rt.Project, digest: sha256.Sum256([]byte(secret))}
	if status, stale, ok := r.callers.get(k, r.cfg.Clock.Now()); ok {
		if stale {
			r.recheck(k)
		}
		return status
	}
	// The question outlives the request that asked it: the others
	// waiting on it still want the answer.
	ch := r.flight.DoChan(k.flightKey(), func() (any, error) { return r.ask(k) })
	select {
	case res := <-ch:
		if res.Err != nil {
			// A flood's waits would flood the log: they are debug.
			level := slog.LevelWarn
			if errors.Is(res.Err, errBusy) {
				level = slog.LevelDebug
			}
			r.cfg.Log.Log(req.Context(), level, "asking the server about a caller", "service", rt.Name, "err", res.Err)
			return http.StatusServiceUnavailable
		}
		return res.Val.(int)
	case <-req.Context().Done():
		return http.StatusServiceUnavailable
	}
}

// ask asks the server about k, waiting for one of maxAsking turns (none
// when maxWaiting already wait), and remembers the answer.
func (r *Remote) ask(k authKey) (int, error) {
	select {
	case r.asking <- struct{}{}:
	default:
		if r.waiting.Add(1) > maxWaiting {
			r.waiting.Add(-1)
			return 0, fmt.Errorf("%w: %d in flight and %d waiting", errBusy, maxAsking, maxWaiting)
		}
		select {
		case r.asking <- struct{}{}:
			r.waiting.Add(-1)
		case <-r.cfg.Clock.After(r.turnWait):
			r.waiting.Add(-1)
			return 0, fmt.Errorf("%w: %d in flight for %s", errBusy, maxAsking, r.turnWait)
		}
	}
	defer func() { <-r.asking }()
	return r.query(k)
}

// recheck asks the server about k, a caller let in whose yes expired, in
// the background, unless k is being asked about already or all
// maxRechecks turns are taken (a later request tries again). A no
// replaces the yes at once; an error leaves the stale yes to run out.
func (r *Remote) recheck(k authKey) {
	r.recheckMu.Lock()
	defer r.recheckMu.Unlock()
	if r.rechecking[k] {
		return
	}
	select {
	case r.rechecks <- struct{}{}:
	default:
		return
	}
	r.rechecking[k] = true
	go func() {
		if _, err := r.query(k); err != nil {
			r.cfg.Log.Warn("asking the server again about a caller let in", "service", k.service, "err", err)
		}
		r.recheckMu.Lock()
		delete(r.rechecking, k)
		r.recheckMu.Unlock()
		<-r.rechecks
	}()
}

// query asks the server about k and remembers the answer.
func (r *Remote) query(k authKey) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	now := r.cfg.Clock.Now()
	status, err := r.cfg.Server.ProxyAuthorize(ctx, k.service, k.digest[:])
	if err != nil {
		return 0, err
	}
	ttl := r.cfg.AuthTTL
	if status != 0 {
		ttl /= 5
	}
	r.callers.put(k, status, now.Add(ttl))
	return status, nil
}

// ServeHTTP serves the services' routes (Proxy.ServeRoute), /healthz, and
// /readyz (503 until the endpoint list was read once).
func (r *Remote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.proxy.ServeRoute(w, req, func(req *http.Request, rt *model.ProxyRoute) int { return r.authorize(req, rt) }) {
		return
	}
	switch req.URL.Path {
	case "/healthz":
		_, _ = w.Write([]byte("ok\n"))
	case "/readyz":
		if !r.ready.Load() {
			http.Error(w, "the server's endpoint list was not read yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	default:
		http.Error(w, "no such service route: use /services/NAME/… or a service's host", http.StatusNotFound)
	}
}
