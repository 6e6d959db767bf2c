package client

import (
	"net/http"
	"testing"
	"time"
)

// TestBusyWait: which answers are a busy server's, and how long the client
// waits before sending again: never less than Retry-After, at most
// Retry-After plus its jittered share for the try.
func TestBusyWait(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		status     int
		retryAfter string
		try        int
		busy       bool
		min, max   time.Duration
	}{
		"503 with seconds":        {503, "2", 0, true, 2 * time.Second, 4 * time.Second},
		"503, later try, wider":   {503, "1", 3, true, time.Second, 9 * time.Second},
		"429 without Retry-After": {429, "", 0, true, time.Second, 2 * time.Second},
		"503 with an HTTP date":   {503, time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat), 0, true, 3 * time.Second, 11 * time.Second},
		"503 asking for an hour":  {503, "3600", 0, true, maxRetryAfter, 2 * maxRetryAfter},
		"503 without Retry-After": {503, "", 0, false, 0, 0},
		"500 with Retry-After":    {500, "1", 0, false, 0, 0},
		"201":                     {201, "", 0, false, 0, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
			if tt.retryAfter != "" {
				resp.Header.Set("Retry-After", tt.retryAfter)
			}
			for range 50 { // the jitter: every draw within the bounds
				d, busy := busyWait(resp, tt.try)
				if busy != tt.busy {
					t.Fatalf("busy = %v, want %v", busy, tt.busy)
				}
				if busy && (d < tt.min || d > tt.max) {
					t.Fatalf("wait %v, want within [%v, %v]", d, tt.min, tt.max)
				}
			}
		})
	}
}
