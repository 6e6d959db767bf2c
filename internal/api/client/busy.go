package client

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// DefaultBusyWait bounds how long one call waits out a busy server, all
// its retries together.
const DefaultBusyWait = 2 * time.Minute

// maxRetryAfter caps the wait one Retry-After may ask for.
const maxRetryAfter = 30 * time.Second

// Busy describes a retry after a busy server's answer, for OnBusy.
type Busy struct {
	Method, Path string
	// Status is 503 or 429; Detail is the server's explanation.
	Status int
	Detail string
	// Try counts the retries of this call so far (1 for the first);
	// Wait is how long the client sleeps before it.
	Try  int
	Wait time.Duration
}

// SetBusyWait bounds the total time a call waits out a busy server
// (DefaultBusyWait; 0 never retries). Set it before the client is shared.
func (c *Client) SetBusyWait(d time.Duration) { c.busyWait = d }

// OnBusy calls f before each wait for a busy server, so that a command can
// show its progress. Set it before the client is shared.
func (c *Client) OnBusy(f func(Busy)) { c.onBusy = f }

// busyWait returns how long to wait before retrying resp, a server's
// answer that it is too busy (429, or 503 with Retry-After: a shed
// request, which the server did not act on), and whether it is one. The
// wait honours Retry-After, plus a jittered share that grows with try, so
// that clients shed together do not come back together.
func busyWait(resp *http.Response, try int) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	if v == "" && resp.StatusCode == http.StatusServiceUnavailable {
		return 0, false // a 503 of another kind (not ready, no leader): not ours to retry
	}
	after := time.Second
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		after = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		after = time.Until(t)
	}
	after = min(max(after, 100*time.Millisecond), maxRetryAfter)
	spread := after << min(try, 3)
	return after + rand.N(spread), true
}

// sleep waits d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
