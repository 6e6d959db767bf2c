package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Webhook headers. The signature is "sha256=" and the hex HMAC-SHA256 of
// the raw body under the receiver's signing key; receivers recompute it
// and compare in constant time, and deduplicate by the id header (the
// body's id): delivery is at least once.
const (
	HeaderSignature      = "X-Gpufleet-Signature"
	HeaderNotificationID = "X-Gpufleet-Notification-Id"
)

// Notification kinds: every webhook body carries its kind.
const (
	KindBudget = "budget"
	KindAlert  = "alert"
)

// Sign returns the signature header value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is body's signature under secret.
func Verify(secret, body []byte, sig string) bool {
	return hmac.Equal([]byte(sig), []byte(Sign(secret, body)))
}

// A notification is retried for GiveUpAfter after it was made, and at
// least MinTries times, then dropped (logged); retries back off from 1s,
// doubling, to at most 10m.
const (
	GiveUpAfter = 24 * time.Hour
	MinTries    = 10
)

// Backoff is the wait before the next try after attempts failed tries.
func Backoff(attempts int) time.Duration {
	d := time.Second << min(attempts-1, 20)
	return min(d, 10*time.Minute)
}

// Receiver resolves where n goes and the key that signs it. Its errors
// must not quote the URL or the key: they are kept and logged.
type Receiver func(n *store.Notification) (url string, key []byte, err error)

// Committer makes delivery outcomes durable.
type Committer interface {
	// Commit calls build and submits the batch it returns, ordered after
	// every batch submitted before (so after the one that queued the
	// notification), and waits until it is durable or ctx ends. build
	// runs once, with the committer's ordering held: it must be quick.
	Commit(ctx context.Context, build func() *store.Batch) error
}

// Config wires an Outbox. Receiver and Committer are required.
type Config struct {
	Clock clock.Clock
	Log   *slog.Logger
	// HTTP posts the webhooks (a client with a 10s timeout when nil).
	HTTP      *http.Client
	Receiver  Receiver
	Committer Committer
}

// Outbox holds the notifications waiting for delivery. Its methods are
// safe for concurrent use.
type Outbox struct {
	cfg  Config
	kick chan struct{}
	// deliverMu makes deliveries one at a time, so a notification is
	// never posted twice at once.
	deliverMu sync.Mutex

	// mu guards waiting.
	mu      sync.Mutex
	waiting map[string]*store.Notification
}

// New returns an outbox holding the notifications loaded from the store.
func New(cfg Config, loaded []*store.Notification) *Outbox {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	o := &Outbox{cfg: cfg, kick: make(chan struct{}, 1), waiting: make(map[string]*store.Notification, len(loaded))}
	for _, n := range loaded {
		o.waiting[n.ID] = clone(n)
	}
	return o
}

// Queue puts n in the outbox and appends it to b, unless a notification
// with its id is already waiting (the same firing or alert again), and
// wakes the delivery loop. The caller commits b: n is durable with the
// change that made it. It reports whether n was queued.
func (o *Outbox) Queue(n *store.Notification, b *store.Batch) bool {
	o.mu.Lock()
	if _, dup := o.waiting[n.ID]; dup {
		o.mu.Unlock()
		return false
	}
	o.waiting[n.ID] = clone(n)
	o.mu.Unlock()
	b.Notifications = append(b.Notifications, clone(n))
	select {
	case o.kick <- struct{}{}:
	default:
	}
	return true
}

// Kicked receives when a notification was queued.
func (o *Outbox) Kicked() <-chan struct{} { return o.kick }

// Next returns when the earliest waiting notification is due; false when
// none waits.
func (o *Outbox) Next() (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var next time.Time
	for _, n := range o.waiting {
		if next.IsZero() || n.NextAt.Before(next) {
			next = n.NextAt
		}
	}
	return next, !next.IsZero()
}

// Waiting returns a copy of the waiting notification with id id.
func (o *Outbox) Waiting(id string) (*store.Notification, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.waiting[id]
	if !ok {
		return nil, false
	}
	return clone(n), true
}

// Len returns how many notifications wait.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.waiting)
}

// DeliverDue sends every notification whose time has come, one at a time
// in id order, and records each outcome durably before the next:
// delivered (a tombstone), given up, or the next try. A receiver that
// answers 2xx has it; anything else, or a receiver that cannot be
// resolved now, is retried.
func (o *Outbox) DeliverDue(ctx context.Context) {
	o.deliverMu.Lock()
	defer o.deliverMu.Unlock()
	now := o.cfg.Clock.Now()
	o.mu.Lock()
	var due []*store.Notification
	for _, n := range o.waiting {
		if !n.NextAt.After(now) {
			due = append(due, clone(n))
		}
	}
	o.mu.Unlock()
	slices.SortFunc(due, func(a, b *store.Notification) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range due {
		if ctx.Err() != nil {
			return
		}
		err := o.post(ctx, n)
		now := o.cfg.Clock.Now()
		n.Attempts++
		switch {
		case err == nil:
			n.Delivered, n.LastError = true, ""
		case n.Attempts >= MinTries && now.Sub(n.Created) > GiveUpAfter:
			n.Delivered, n.LastError = true, "gave up: "+err.Error()
			o.cfg.Log.Error("webhook given up", "notification_id", n.ID, "kind", n.Kind, "attempts", n.Attempts, "err", err)
		default:
			n.LastError, n.NextAt = err.Error(), now.Add(Backoff(n.Attempts))
			o.cfg.Log.Warn("webhook failed; will retry", "notification_id", n.ID, "kind", n.Kind, "attempts", n.Attempts, "err", err)
		}
		err = o.cfg.Committer.Commit(ctx, func() *store.Batch {
			o.mu.Lock()
			if n.Delivered {
				delete(o.waiting, n.ID)
			} else {
				o.waiting[n.ID] = clone(n)
			}
			o.mu.Unlock()
			return &store.Batch{Cost: store.Cost{Notifications: []*store.Notification{clone(n)}}}
		})
		if err != nil {
			return
		}
	}
}

func (o *Outbox) post(ctx context.Context, n *store.Notification) error {
	url, key, err := o.cfg.Receiver(n)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(n.Body))
	if err != nil {
		return errors.New("building webhook request: the URL does not parse")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderNotificationID, n.ID)
	req.Header.Set(HeaderSignature, Sign(key, n.Body))
	resp, err := o.cfg.HTTP.Do(req)
	if err != nil {
		// A *url.Error quotes the URL, which may be a secret (it is kept
		// in LastError and logged): keep only what went wrong.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("posting webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("posting webhook: status %d", resp.StatusCode)
	}
	return nil
}

func clone(n *store.Notification) *store.Notification {
	c := *n
	return &c
}
