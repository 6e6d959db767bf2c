package httpcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/agentapi/httpcp"
)

// joinServer answers POST /v1/agent/join: 409 for the first conflicts
// calls, then the agent token once for join token "gfn_ok" from instance
// "i-1"; 403 otherwise.
type joinServer struct {
	mu        sync.Mutex
	conflicts int
	spent     bool
	calls     int
}

func (s *joinServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	var req agentapi.JoinRequest
	if r.URL.Path != httpcp.JoinPath || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	switch {
	case s.conflicts > 0:
		s.conflicts--
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"detail": "launch not recorded yet"}`))
	case r.Header.Get("Authorization") != "Bearer gfn_ok" || req.InstanceID != "i-1" || s.spent:
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"detail": "join refused"}`))
	default:
		s.spent = true
		_ = json.NewEncoder(w).Encode(agentapi.JoinResponse{NodeID: "n-1", Token: "gfa_agent"})
	}
}

func (s *joinServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func TestJoinAndStore(t *testing.T) {
	t.Parallel()
	js := &joinServer{conflicts: 2}
	srv := httptest.NewServer(js)
	defer srv.Close()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "agent.token")
	o := httpcp.JoinOptions{JoinToken: "gfn_ok", InstanceID: "i-1", TokenFile: file, MaxBackoff: time.Millisecond}

	tok, err := httpcp.JoinAndStore(ctx, srv.URL, o)
	if err != nil || tok != "gfa_agent" {
		t.Fatalf("join = %q, %v; want the agent token after two 409s", tok, err)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored token: %v, want mode 0600", err)
	}
	// A restarted agent uses the stored token; the spent join token is
	// not presented again.
	calls := js.count()
	if tok, err := httpcp.JoinAndStore(ctx, srv.URL, o); err != nil || tok != "gfa_agent" || js.count() != calls {
		t.Fatalf("second start = %q, %v after %d more calls; want the stored token and none", tok, err, js.count()-calls)
	}
	// A refusal is final, not retried.
	o.TokenFile = filepath.Join(t.TempDir(), "agent.token")
	calls = js.count()
	var he *httpcp.Error
	if _, err := httpcp.JoinAndStore(ctx, srv.URL, o); !errors.As(err, &he) || he.Status != http.StatusForbidden || js.count() != calls+1 {
		t.Fatalf("a spent join token: %v after %d calls; want one 403", err, js.count()-calls)
	}
	o.JoinToken = ""
	if _, err := httpcp.JoinAndStore(ctx, srv.URL, o); !errors.Is(err, httpcp.ErrNoJoinToken) {
		t.Fatalf("no token at all: %v", err)
	}
}
