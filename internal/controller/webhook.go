package controller

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
)

// Webhook headers. The signature is "sha256=" and the hex HMAC-SHA256 of
// the raw body under the server's webhook secret; receivers recompute it
// and compare in constant time, and deduplicate by the id header (the
// body's id): delivery is at least once.
const (
	HeaderSignature      = "X-Gpufleet-Signature"
	HeaderNotificationID = "X-Gpufleet-Notification-Id"
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

// deliverDue sends every notification whose time has come, one at a time,
// and records each outcome durably: delivered (a tombstone) or the next
// try. A receiver that answers 2xx has it; anything else is retried.
func (c *Controller) deliverDue(ctx context.Context) {
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
			c.cfg.Log.Error("webhook given up", "notification_id", n.ID, "attempts", n.Attempts, "err", err)
		default:
			n.LastError, n.NextAt = err.Error(), now.Add(backoff(n.Attempts))
			c.cfg.Log.Warn("webhook failed; will retry", "notification_id", n.ID, "attempts", n.Attempts, "err", err)
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

func (c *Controller) post(ctx context.Context, client *http.Client, n *store.Notification) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(n.Body))
	if err != nil {
		return fmt.Errorf("building webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderNotificationID, n.ID)
	req.Header.Set(HeaderSignature, Sign(c.cfg.Cost.WebhookSecret, n.Body))
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("posting webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("posting webhook: status %d", resp.StatusCode)
	}
	return nil
}
