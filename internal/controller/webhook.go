package controller

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"

	"github.com/gpufleet/gpufleet/internal/controller/notify"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Webhook headers (notify.HeaderSignature, notify.HeaderNotificationID).
const (
	HeaderSignature      = notify.HeaderSignature
	HeaderNotificationID = notify.HeaderNotificationID
)

// Notification kinds: every webhook body carries its kind.
const (
	NotifyBudget = notify.KindBudget
	NotifyAlert  = notify.KindAlert
)

// Sign returns the signature header value of body under secret
// (notify.Sign).
func Sign(secret, body []byte) string { return notify.Sign(secret, body) }

// Verify reports whether sig is body's signature under secret
// (notify.Verify).
func Verify(secret, body []byte, sig string) bool { return notify.Verify(secret, body, sig) }

// newOutbox returns the webhook outbox holding the loaded notifications,
// delivering through c's receivers and committing through c's committer.
func (c *Controller) newOutbox(loaded []*store.Notification) *notify.Outbox {
	return notify.New(notify.Config{Clock: c.cfg.Clock, Log: c.cfg.Log, HTTP: c.cfg.Cost.HTTP,
		Receiver: c.receiver, Committer: outboxCommits{c}}, loaded)
}

// outboxCommits commits the outbox's delivery outcomes in order with the
// controller's own changes (notify.Committer).
type outboxCommits struct{ c *Controller }

func (oc outboxCommits) Commit(ctx context.Context, build func() *store.Batch) error {
	c := oc.c
	c.mu.Lock()
	cm := c.com.submit(build())
	c.mu.Unlock()
	return cm.wait(ctx)
}

// queueNotificationLocked puts n in the outbox and in b, unless a
// notification with its id is already waiting (the same firing or alert
// again). Callers hold c.mu and commit b.
func (c *Controller) queueNotificationLocked(n *store.Notification, b *store.Batch) {
	c.outbox.Queue(n, b)
}

// deliverDue sends every notification whose time has come
// (notify.Outbox.DeliverDue).
func (c *Controller) deliverDue(ctx context.Context) { c.outbox.DeliverDue(ctx) }

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
