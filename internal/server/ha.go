package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/endpoints"
	"github.com/gpufleet/gpufleet/internal/server/leader"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
)

// High availability (docs/postgres.md): on a shared PostgreSQL store every
// replica campaigns for the controller lease. A follower runs no loops; it
// keeps a mirror of the store current from the change feed and answers
// reads from it (follow.go); its API sends every other request but
// /healthz, /readyz and /metrics to the leader (307, or 503 while none is
// known). The replica that wins catches up with the feed's tail, builds
// its controller from the mirror and runs as a single server does, every
// batch fenced by its lease; when it loses the lease it stops (Run returns
// an error wrapping leader.ErrLost, or the store's *store.FencedError), and
// its supervisor restarts it as a follower.

// DefaultReplicaID is this process's replica ID: host name and PID.
func DefaultReplicaID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// fencedStore puts the leader's fence on every batch: the one place the
// controller's writes (through its committer) pass on their way to the
// database.
type fencedStore struct {
	backingStore
	fence  *store.Fence
	loaded *store.Dump
}

// Load returns the state the replica brought from following (its mirror,
// caught up), once; without it, the store's.
func (s *fencedStore) Load(ctx context.Context) (*store.Dump, error) {
	if d := s.loaded; d != nil {
		s.loaded = nil
		return d, nil
	}
	return s.backingStore.Load(ctx)
}

func (s *fencedStore) Submit(b *store.Batch) <-chan error {
	if b != nil {
		b.Fence = s.fence
	}
	return s.backingStore.Submit(b)
}

// Prepare is Submit's encoding apart from its queueing (store.Preparer), so
// the controller's committer encodes outside its lock behind this wrapper
// too.
func (s *fencedStore) Prepare(b *store.Batch) func() <-chan error {
	if b != nil {
		b.Fence = s.fence
	}
	return store.Prepare(s.backingStore, b)
}

// switchHandler serves the follower's handler until the API's replaces it.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// followerHandler answers while this replica follows: /healthz is ok,
// /readyz says follower and names the leader (503: a load balancer routes
// writes to the leader only), /metrics serves the registry, the reads a
// follower serves are answered from its own state, and every other
// request is redirected to the leader (307 keeps the method and body) or,
// with no leader known, refused with 503.
//
// reads, when set, answers the reads a follower serves from its own state
// (follow.go) and reports whether it did.
func followerHandler(el *leader.Elector, metrics http.Handler, reads func(http.ResponseWriter, *http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, _ := el.Current()
		w.Header().Set(endpoints.RoleHeader, "follower")
		if l.URL != "" {
			w.Header().Set(endpoints.LeaderHeader, l.URL)
		}
		switch r.URL.Path {
		case "/healthz":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok\n"))
			return
		case "/metrics":
			metrics.ServeHTTP(w, r)
			return
		case "/readyz":
			problem(w, http.StatusServiceUnavailable, followerDetail(el.ID(), l))
			return
		}
		if reads != nil && reads(w, r) {
			return
		}
		if l.URL == "" {
			problem(w, http.StatusServiceUnavailable, followerDetail(el.ID(), l))
			return
		}
		target := l.URL + r.URL.RequestURI()
		w.Header().Set("Location", target)
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
}

func followerDetail(self string, l leader.Leader) string {
	if l.ID == "" {
		return fmt.Sprintf("follower %s: no leader known yet (an election is in progress); retry shortly", self)
	}
	return fmt.Sprintf("follower %s: the leader is %s at %s (epoch %d)", self, l.ID, l.URL, l.Epoch)
}

func problem(w http.ResponseWriter, status int, detail string) {
	data, _ := json.Marshal(api.Problem{Title: http.StatusText(status), Status: status, Detail: detail})
	w.Header().Set("Content-Type", api.ProblemContentType)
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// advertiseURL is the URL other replicas send clients to: --advertise-url,
// or the listener's own with an unspecified host replaced by this host's
// name.
func advertiseURL(flag, listened string) string {
	if flag != "" {
		return strings.TrimRight(flag, "/")
	}
	for _, any := range []string{"://0.0.0.0:", "://[::]:"} {
		if strings.Contains(listened, any) {
			host, _ := os.Hostname()
			return strings.Replace(listened, any, "://"+host+":", 1)
		}
	}
	return listened
}

// replicated reports whether this server is one of several replicas: every
// server on PostgreSQL is, even when it runs alone.
func (c *Config) replicated() bool { return postgres.IsDSN(c.Store) }

// electorLeading is el.Leading, nil without replicas.
func electorLeading(el *leader.Elector) func() bool {
	if el == nil {
		return nil
	}
	return el.Leading
}

// leaderLine is /readyz's description of the leader, nil without replicas.
func leaderLine(el *leader.Elector) func() string {
	if el == nil {
		return nil
	}
	return func() string {
		l, self := el.Current()
		if !self {
			return "stepping down"
		}
		return fmt.Sprintf("leader %s at %s (epoch %d)", l.ID, l.URL, l.Epoch)
	}
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
