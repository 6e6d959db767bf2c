package httpcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
)

// JoinOptions say how a launched instance joins (JoinAndStore).
type JoinOptions struct {
	// JoinToken is the one-time join token; InstanceID the instance it
	// was minted for. Both required when TokenFile holds no token.
	JoinToken, InstanceID string
	// TokenFile is where the agent token is kept (mode 0600): read when it
	// exists, written after an exchange.
	TokenFile string
	Client    Options
	Logger    *slog.Logger
	// MaxBackoff caps the wait between retries (default 30s; the first is
	// a second).
	MaxBackoff time.Duration
}

// ErrNoJoinToken: TokenFile holds no token and there is no join token.
var ErrNoJoinToken = errors.New("no agent token stored and no join token")

// JoinAndStore returns the agent token kept in o.TokenFile or, when there
// is none, the one the server at base gives for o.JoinToken (POST
// /v1/agent/join), which it then stores. The exchange is retried while
// the server is unreachable, failing (5xx) or has not recorded the launch
// yet (409); any other refusal (401: spent or expired; 403: another
// instance) is returned at once, as the token will never be accepted.
func JoinAndStore(ctx context.Context, base string, o JoinOptions) (string, error) {
	if b, err := os.ReadFile(o.TokenFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the joined agent token: %w", err)
	}
	if o.JoinToken == "" {
		return "", ErrNoJoinToken
	}
	if o.InstanceID == "" {
		return "", errors.New("joining: the instance id is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	cl := New(base, o.JoinToken, o.Client)
	wait := min(time.Second, o.MaxBackoff)
	for {
		resp, err := cl.Join(ctx, o.InstanceID)
		var he *Error
		switch {
		case err == nil:
			if err := writeSecret(o.TokenFile, resp.Token); err != nil {
				return "", err
			}
			o.Logger.Info("joined the server", "node_id", resp.NodeID, "instance", o.InstanceID)
			return resp.Token, nil
		case errors.As(err, &he) && he.Status != http.StatusConflict && he.Status < 500:
			return "", fmt.Errorf("joining with the join token: %w", err)
		}
		o.Logger.Warn("joining the server, retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, o.MaxBackoff)
	}
}

// writeSecret writes s to path, readable by this user only, atomically.
func writeSecret(path, s string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s+"\n"), 0o600); err != nil {
		return fmt.Errorf("storing the joined agent token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("storing the joined agent token: %w", err)
	}
	return nil
}
