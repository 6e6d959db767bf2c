// Package notify delivers alerts to webhooks: a JSON POST signed with
// HMAC-SHA256 of the body under a shared secret, retried with backoff until
// the receiver answers 2xx or the attempts run out. Each delivery has an
// id that stays the same across retries, so receivers deduplicate
// (at-least-once delivery). It has the shape of the budget notifications'
// outbox (store.Notification), so alerts can move onto that durable path.
//
// Invariants: Notify never blocks (a full queue drops the newest and
// counts it); one goroutine delivers, in order.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// Headers a receiver checks.
const (
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256 of the body
	// under the secret.
	HeaderSignature = "X-Gpufleet-Signature"
	// HeaderDelivery is the delivery id, the same on every retry.
	HeaderDelivery = "X-Gpufleet-Delivery"
)

// Options configures a Webhook. Zero fields take the defaults noted.
type Options struct {
	URL    string // required
	Secret []byte // signs bodies; empty sends no signature
	Client *http.Client
	Clock  clock.Clock
	Logger *slog.Logger
	// Attempts is how many times one delivery is tried (5); Backoff is
	// the first wait between them, doubling (1s).
	Attempts int
	Backoff  time.Duration
	// Queue bounds deliveries waiting (256).
	Queue int
}

// Webhook posts events to one URL.
type Webhook struct {
	opts    Options
	queue   chan delivery
	dropped atomic.Int64
}

type delivery struct {
	id   string
	body []byte
}

// New returns a webhook; deliveries start with Run.
func New(opts Options) *Webhook {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 256
	}
	return &Webhook{opts: opts, queue: make(chan delivery, opts.Queue)}
}

// Send queues v, as JSON in an envelope {"id","kind","event"}, for
// delivery; it never blocks.
func (w *Webhook) Send(kind string, v any) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	body, err := json.Marshal(struct {
		ID    string `json:"id"`
		Kind  string `json:"kind"`
		Event any    `json:"event"`
	}{id, kind, v})
	if err != nil {
		w.opts.Logger.Error("encoding webhook event", "kind", kind, "err", err)
		return
	}
	select {
	case w.queue <- delivery{id: id, body: body}:
	default:
		w.dropped.Add(1)
		w.opts.Logger.Warn("webhook queue full; event dropped", "kind", kind)
	}
}

// Dropped counts events dropped because the queue was full.
func (w *Webhook) Dropped() int64 { return w.dropped.Load() }

// Run delivers queued events until ctx ends.
func (w *Webhook) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-w.queue:
			w.deliver(ctx, d)
		}
	}
}

func (w *Webhook) deliver(ctx context.Context, d delivery) {
	wait := w.opts.Backoff
	for i := 1; ; i++ {
		err := w.post(ctx, d)
		if err == nil {
			return
		}
		if i >= w.opts.Attempts || ctx.Err() != nil {
			w.opts.Logger.Warn("webhook delivery failed; giving up", "delivery", d.id, "attempts", i, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.opts.Clock.After(wait):
		}
		wait *= 2
	}
}

func (w *Webhook) post(ctx context.Context, d delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.opts.URL, bytes.NewReader(d.body))
	if err != nil {
		return fmt.Errorf("building webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderDelivery, d.id)
	if len(w.opts.Secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(w.opts.Secret, d.body))
	}
	resp, err := w.opts.Client.Do(req)
	if err != nil {
		return fmt.Errorf("posting webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("posting webhook: receiver answered %s", resp.Status)
	}
	return nil
}

// Sign returns the signature header value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is body's signature under secret, in
// constant time.
func Verify(secret, body []byte, sig string) bool {
	return hmac.Equal([]byte(sig), []byte(Sign(secret, body)))
}
