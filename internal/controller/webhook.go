package controller

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
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
	NotifyBudget = "budget"
	NotifyAlert  = "alert"
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

// A notification is retried for webhookGiveUp after it was made, and at
// least webhookMinTries times, then dropped (logged); retries back off from
// 1s, doubling, to at most 10m.
const (
	webhookGiveUp   = 24 * time.Hour
	webhookMinTries = 10
)

func backoff(attempts int) time.Duration {
	d := time.Second << min(attempts-1, 20)
	return min(d, 10*time.Minute)
}

// queueNotificationLocked puts n in the outbox and in b, unless a
// notification with its id is already waiting (the same firing or alert
// again), and wakes the delivery loop. Callers hold c.mu and commit b.
func (c *Controller) queueNotificationLocked(n *store.Notification, b *store.Batch) {
	if _, dup := c.cost.outbox[n.ID]; dup {
		return
	}
	c.cost.outbox[n.ID] = n
	b.Notifications = append(b.Notifications, cloneNote(n))
	select {
	case c.outboxKick <- struct{}{}:
	default:
	}
}

// nextDeliveryLocked returns when the earliest waiting notification is
// due; false when none waits.
func (c *Controller) nextDeliveryLocked() (time.Time, bool) {
	var next time.Time
	for _, n := range c.cost.outbox {
		if next.IsZero() || n.NextAt.Before(next) {
			next = n.NextAt
		}
	}
	return next, !next.IsZero()
}

// deliverDue sends every notification whose time has come, one at a time,
// and records each outcome durably: delivered (a tombstone) or the next
// try. A receiver that answers 2xx has it; anything else, or a receiver
// that cannot be resolved now, is retried.
func (c *Controller) deliverDue(ctx context.Context) {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	var due []*store.Notification
	for _, n := range c.cost.outbox {
		if !n.NextAt.After(now) {
			due = append(due, cloneNote(n))
		}
	}
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b *store.Notification) int { return strings.Compare(a.ID, b.ID) })
	client := c.cfg.Cost.HTTP
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	for _, n := range due {
		if ctx.Err() != nil {
			return
		}
		err := c.post(ctx, client, n)
		now := c.cfg.Clock.Now()
		n.Attempts++
		switch {
		case err == nil:
			n.Delivered, n.LastError = true, ""
		case n.Attempts >= webhookMinTries && now.Sub(n.Created) > webhookGiveUp:
			n.Delivered, n.LastError = true, "gave up: "+err.Error()
			c.cfg.Log.Error("webhook given up", "notification_id", n.ID, "kind", n.Kind, "attempts", n.Attempts, "err", err)
		default:
			n.LastError, n.NextAt = err.Error(), now.Add(backoff(n.Attempts))
			c.cfg.Log.Warn("webhook failed; will retry", "notification_id", n.ID, "kind", n.Kind, "attempts", n.Attempts, "err", err)
		}
		c.mu.Lock()
		if n.Delivered {
			delete(c.cost.outbox, n.ID)
		} else {
			c.cost.outbox[n.ID] = n
		}
		cm := c.com.submit(&store.Batch{Cost: store.Cost{Notifications: []*store.Notification{cloneNote(n)}}})
		c.mu.Unlock()
		if err := cm.wait(ctx); err != nil {
			return
		}
	}
}

// receiver resolves where n goes and the key that signs it: the sealed
// secrets it names, else the server's receiver for its kind and the
// server's webhook secret. Errors never quote the URL or the key.
func (c *Controller) receiver(n *store.Notification) (url string, key []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case n.URLRef != "":
		v, err := c.openRefLocked(model.SecretRef(n.URLRef))
		if err != nil {
			return "", nil, fmt.Errorf("resolving the webhook URL: %w", err)
		}
		url = v
	case n.URL != "":
		url = n.URL // an inline URL from before secret references
	case n.Kind == NotifyAlert:
		url = c.alertWebhookURL()
	default:
		url = c.cfg.Cost.WebhookURL
	}
	if url == "" {
		return "", nil, fmt.Errorf("no receiver is configured for %s notifications", cmpOr(n.Kind, NotifyBudget))
	}
	if u, err := neturl.Parse(url); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		what := "secret " + cmpOr(n.URLRef, "of the server")
		if n.URLRef == "" && n.URL != "" {
			what = "inline in the budget"
		}
		return "", nil, fmt.Errorf("the webhook URL (%s) is not an http(s) URL", what)
	}
	key = c.cfg.Cost.WebhookSecret
	if n.KeyRef != "" {
		v, err := c.openRefLocked(model.SecretRef(n.KeyRef))
		if err != nil {
			return "", nil, fmt.Errorf("resolving the webhook signing key: %w", err)
		}
		key = []byte(v)
	}
	if len(key) == 0 {
		return "", nil, errors.New("no signing key: set the server's --webhook-secret or the webhook's signingKeyRef")
	}
	return url, key, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// alertWebhookURL is where alerts go: AlertRules.WebhookURL, else the
// server's default receiver.
func (c *Controller) alertWebhookURL() string {
	if c.cfg.Alerts.WebhookURL != "" {
		return c.cfg.Alerts.WebhookURL
	}
	return c.cfg.Cost.WebhookURL
}

// openRefLocked returns the value of the secret ref names. Callers hold
// c.mu.
func (c *Controller) openRefLocked(ref model.SecretRef) (string, error) {
	project, name, ok := ref.Split()
	if !ok {
		return "", fmt.Errorf("%q is not project/NAME", string(ref))
	}
	v, held, opened := c.vault.Value(project, name)
	if opened {
		return v, nil
	}
	if held {
		return "", fmt.Errorf("secret %s does not open with this server's keys: %w", ref, errSecretUnavailable)
	}
	return "", fmt.Errorf("secret %s: %w", ref, ErrNotFound)
}

func (c *Controller) post(ctx context.Context, client *http.Client, n *store.Notification) error {
	url, key, err := c.receiver(n)
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
	resp, err := client.Do(req)
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
