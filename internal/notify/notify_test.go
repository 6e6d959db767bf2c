package notify_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/notify"
)

// A delivery is signed, keeps its id across retries and stops at the
// first 2xx.
func TestWebhookSignsAndRetries(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	var mu sync.Mutex
	var ids []string
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !notify.Verify(secret, body, r.Header.Get(notify.HeaderSignature)) {
			t.Errorf("bad signature %q", r.Header.Get(notify.HeaderSignature))
		}
		mu.Lock()
		ids = append(ids, r.Header.Get(notify.HeaderDelivery))
		n := len(ids)
		mu.Unlock()
		if n < 3 {
			http.Error(w, "later", http.StatusServiceUnavailable)
			return
		}
		got <- body
	}))
	defer srv.Close()
	w := notify.New(notify.Options{URL: srv.URL, Secret: secret, Backoff: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.Send("alert", map[string]string{"rule": "job-idle"})
	select {
	case body := <-got:
		if len(body) == 0 {
			t.Error("empty body")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] || ids[0] == "" {
		t.Errorf("delivery ids = %v, want the same id three times", ids)
	}
}
