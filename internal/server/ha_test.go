package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/server/leader"
	"github.com/gpufleet/gpufleet/internal/store"
)

// heldBy is a Leaser whose lease another replica holds.
type heldBy struct{ holder string }

func (h heldBy) Acquire(context.Context, string, string, time.Duration) (store.Lease, error) {
	return store.Lease{}, &store.HeldError{Name: leader.LeaseName, Holder: h.holder, Epoch: 7}
}
func (heldBy) Renew(context.Context, store.Lease, time.Duration) (store.Lease, error) {
	return store.Lease{}, store.ErrLeaseLost
}
func (heldBy) Release(context.Context, store.Lease) error { return nil }

func TestFollowerHandler(t *testing.T) {
	for _, tc := range []struct {
		name, holder, path string
		status             int
		location, body     string
	}{
		{"redirect", "r1 http://a:7777", "/v1/jobs?state=running", 307, "http://a:7777/v1/jobs?state=running", ""},
		{"readyz", "r1 http://a:7777", "/readyz", 503, "", "follower me: the leader is r1 at http://a:7777 (epoch 7)"},
		{"healthz", "r1 http://a:7777", "/healthz", 200, "", "ok"},
		{"no leader", "", "/v1/jobs", 503, "", "no leader known yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el, err := leader.New(leader.Config{Leaser: heldBy{tc.holder}, ID: "me", URL: "http://me:7777"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.holder != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, _ = el.Campaign(ctx) // sees the holder, then times out
				cancel()
			}
			h := followerHandler(el, http.NotFoundHandler(), nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", tc.path, strings.NewReader("{}")))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tc.status || rec.Header().Get("Location") != tc.location || !strings.Contains(string(body), tc.body) {
				t.Errorf("%s: %d Location=%q body %q; want %d %q containing %q", tc.path, rec.Code, rec.Header().Get("Location"), body, tc.status, tc.location, tc.body)
			}
			if rec.Header().Get("X-Gpufleet-Role") != "follower" {
				t.Errorf("role header %q", rec.Header().Get("X-Gpufleet-Role"))
			}
		})
	}
}

func TestAdvertiseURL(t *testing.T) {
	if got := advertiseURL("https://a.example:7777/", "http://0.0.0.0:7777"); got != "https://a.example:7777" {
		t.Errorf("flag: %s", got)
	}
	if got := advertiseURL("", "http://127.0.0.1:7777"); got != "http://127.0.0.1:7777" {
		t.Errorf("loopback: %s", got)
	}
	if got := advertiseURL("", "http://0.0.0.0:7777"); strings.Contains(got, "0.0.0.0") {
		t.Errorf("unspecified host kept: %s", got)
	}
}

func TestValidateReplicaFlags(t *testing.T) {
	c := Config{DataDir: "/d", Listen: "127.0.0.1:7777", LogLevel: "info", MeterInterval: time.Minute, HeartbeatTimeout: time.Minute,
		ReplicaID: "a b", AdvertiseURL: "fleet:7777"}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "--replica-id") || !strings.Contains(err.Error(), `--advertise-url: "fleet:7777" is not an http(s) URL`) {
		t.Errorf("Validate = %v, want --replica-id and --advertise-url refused", err)
	}
	c.ReplicaID, c.AdvertiseURL = "a", "https://a.example:7777"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
}
