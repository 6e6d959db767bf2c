package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/replica"
)

// A follower replica (ha.go) keeps a mirror of the store current by
// tailing the store's change feed (package replica: LISTEN/NOTIFY, with
// polling as the fallback), and serves reads from its own state: a
// read-only controller built once from the mirror and kept current by
// Controller.Replicate, behind the same API handlers the leader runs.
//
// Consistency a reader gets from a follower (docs/postgres.md): every
// answer reflects a prefix of the leader's commits, in order — the state
// as of change X-Gpufleet-Applied-Seq, never a partial commit — and a
// follower answers only while its last read of the feed that found it
// caught up began less than staleReads ago (else it redirects to the
// leader). Read-your-writes is not guaranteed on a follower: a client
// that needs it sends X-Gpufleet-Consistency: leader (redirected to the
// leader) or reads from the leader, as the CLI does once a write has
// taught it the leader. A follower answers reads only for jobs, queues,
// nodes, events, tokens, grants and the version; cost, efficiency,
// explanations, logs and everything else come from the leader.
//
// On takeover the new leader catches up with the feed's tail (the changes
// committed since its last read, and the old leader's last commits) and
// builds its controller from the mirror's Dump, without reading the
// tables again.

const (
	// AppliedSeqHeader carries the change a follower's answer reflects.
	AppliedSeqHeader = "X-Gpufleet-Applied-Seq"
	// ConsistencyHeader set to "leader" asks a follower to send the
	// request to the leader.
	ConsistencyHeader = "X-Gpufleet-Consistency"
	// staleReads bounds how far behind a follower's answers may be.
	staleReads = 5 * time.Second
)

// followerReads are the routes a follower answers from its own state
// (GET only).
var followerReads = map[string]bool{
	"/v1/jobs": true, "/v1/jobs/{id}": true, "/v1/queues": true, "/v1/queues/{name}": true,
	"/v1/nodes": true, "/v1/events": true, "/v1/tokens": true, "/v1/grants": true, "/v1/version": true,
}

// follower is a replica's state while it follows.
type follower struct {
	log    *slog.Logger
	build  func(*store.Dump) (*controller.Controller, error)
	newAPI func(*controller.Controller) (http.Handler, error)

	f    *replica.Follower
	stop context.CancelFunc
	done chan struct{}
	// routes matches a request to its API route pattern.
	routes *http.ServeMux
	mu     sync.Mutex
	ctrl   *controller.Controller
	api    http.Handler
	broken error // a mirror the read controller could not follow
}

// readOnlyStore is the store of a follower's read-only controller: it
// loads the mirror's state and refuses writes (a follower's API forwards
// every write to the leader, so none reaches it).
type readOnlyStore struct{ d *store.Dump }

var errFollowerWrite = errors.New("a follower replica does not write: send writes to the leader")

func (s readOnlyStore) Load(context.Context) (*store.Dump, error) { return s.d, nil }
func (readOnlyStore) Submit(*store.Batch) <-chan error {
	ch := make(chan error, 1)
	ch <- errFollowerWrite
	close(ch)
	return ch
}
func (readOnlyStore) Close() error { return nil }

// noAudit is a follower's Auditor: a follower's refusals (401, 403) are
// never answered by it but sent to the leader, which records them.
type noAudit struct{}

func (noAudit) Audit(_ context.Context, e model.AuditEntry) (model.AuditEntry, error) { return e, nil }

// followConfig is what a follower's read-only controller and API need.
type followConfig struct {
	feed     store.Feed
	keyring  *secrets.Keyring
	redactor *secrets.Redactor
	logs     *logstore.Store
	cat      *catalog.Catalog
	version  string
	log      *slog.Logger
}

// startFollowing takes a snapshot of the store and follows its feed until
// takeOver.
func startFollowing(ctx context.Context, fc followConfig) (*follower, error) {
	fl := &follower{log: fc.log, done: make(chan struct{}), routes: http.NewServeMux()}
	for p := range followerReads {
		fl.routes.Handle("GET "+p, http.NotFoundHandler())
	}
	fl.build = func(d *store.Dump) (*controller.Controller, error) {
		return controller.New(ctx, controller.Config{
			Store: readOnlyStore{d}, Logs: fc.logs, Log: fc.log.With("component", "follower"),
			Keyring: fc.keyring, Redactor: fc.redactor,
			Fatal: func(err error) { fc.log.Warn("follower: a write reached the read-only controller", "err", err) },
		})
	}
	fl.newAPI = func(ctrl *controller.Controller) (http.Handler, error) {
		srv, err := api.New(api.Config{Controller: ctrl, Identity: ctrl.Identity(), Roles: ctrl.Identity(), Auditor: noAudit{},
			Secrets: ctrl.Vault(), Catalog: fc.cat, Logs: fc.logs, Log: fc.log, Version: fc.version})
		if err != nil {
			return nil, err
		}
		return srv.Handler(), nil
	}
	f, err := replica.NewFollower(ctx, replica.Config{Feed: fc.feed, Log: fc.log, OnApply: fl.apply, OnReset: fl.reset})
	if err != nil {
		return nil, fmt.Errorf("following the store: %w", err)
	}
	fl.f = f
	fctx, stop := context.WithCancel(ctx)
	fl.stop = stop
	go func() { defer close(fl.done); _ = f.Run(fctx) }()
	return fl, nil
}

// reset builds the read-only controller from a new mirror (the first
// snapshot, or one after the feed was pruned past this replica).
func (fl *follower) reset(m *replica.Mirror) {
	ctrl, err := fl.build(m.Dump(time.Now()))
	var h http.Handler
	if err == nil {
		h, err = fl.newAPI(ctrl)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.ctrl != nil {
		fl.ctrl.Close()
	}
	fl.ctrl, fl.api, fl.broken = ctrl, h, err
	if err != nil {
		fl.log.Error("follower: cannot serve reads from the replica's state; sending them to the leader", "err", err)
	}
}

// apply hands a change to the read-only controller.
func (fl *follower) apply(c store.Change) {
	fl.mu.Lock()
	ctrl := fl.ctrl
	fl.mu.Unlock()
	if ctrl == nil {
		return
	}
	for _, b := range c.Batches {
		ctrl.Replicate(b)
	}
}

// serveRoute is serve for the route r matches.
func (fl *follower) serveRoute(w http.ResponseWriter, r *http.Request) bool {
	_, pattern := fl.routes.Handler(r)
	return fl.serve(w, r, strings.TrimPrefix(pattern, "GET "))
}

// serve answers r from the replica's state and reports true, or reports
// false (the caller sends r to the leader): a route the follower does not
// serve, a request for the leader, a replica more than staleReads behind,
// or a refusal (401, 403), which the leader answers and audits.
func (fl *follower) serve(w http.ResponseWriter, r *http.Request, pattern string) bool {
	if r.Method != http.MethodGet || !followerReads[pattern] || r.Header.Get(ConsistencyHeader) == "leader" {
		return false
	}
	fl.mu.Lock()
	h := fl.api
	fl.mu.Unlock()
	if h == nil || time.Since(fl.f.Current()) > staleReads {
		return false
	}
	seq := fl.f.Mirror().Seq()
	rec := &bufferedResponse{header: http.Header{}}
	h.ServeHTTP(rec, r)
	if rec.code == http.StatusUnauthorized || rec.code == http.StatusForbidden {
		return false
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.Header().Set(AppliedSeqHeader, strconv.FormatUint(seq, 10))
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body.Bytes())
	return true
}

// takeOver stops following, applies the changes committed since the last
// read (the tail), closes the read-only controller and returns the
// state for the leader's controller and how many changes the tail held.
func (fl *follower) takeOver(ctx context.Context, steps *phases) (*store.Dump, int, error) {
	fl.close()
	steps.done("stop following")
	n, err := fl.f.CatchUp(ctx)
	if errors.Is(err, store.ErrChangesPruned) {
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("catching up with the store's changes: %w", err)
	}
	steps.done("tail")
	d := fl.f.Mirror().Dump(time.Now())
	steps.done("dump")
	return d, n, nil
}

// close stops following and serving reads.
func (fl *follower) close() {
	fl.stop()
	<-fl.done
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.ctrl != nil {
		fl.ctrl.Close()
		fl.ctrl, fl.api = nil, nil
	}
}

// bufferedResponse holds a response until the follower decides to send it.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}
