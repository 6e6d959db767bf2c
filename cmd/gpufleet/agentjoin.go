package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi/httpcp"
	"github.com/gpufleet/gpufleet/internal/provider/aws/imds"
)

// joinedTokenFile is where, in the agent's data dir, a launched instance
// keeps the agent token its join token was exchanged for (mode 0600).
const joinedTokenFile = "agent.token"

// agentToken is the token the agent authenticates with: --token, else the
// one a join stored in the data dir, else the one the join token
// (GPUFLEET_JOIN_TOKEN, from the env file an instance's user-data writes)
// is exchanged for now, which is then stored. A join is retried while the
// server is unreachable or has not recorded the launch yet; a refusal
// (spent, expired, another instance) is final.
func agentToken(ctx context.Context, c *agentConfig, hc *http.Client, log *slog.Logger) (string, error) {
	if c.Token != "" {
		return c.Token, nil
	}
	path := filepath.Join(c.DataDir, joinedTokenFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the joined agent token: %w", err)
	}
	instance := c.InstanceID
	if instance == "" && c.IMDS {
		id, err := imds.New(imds.Options{Endpoint: c.IMDSEndpoint}).InstanceID(ctx)
		if err != nil {
			return "", fmt.Errorf("reading this instance's id from instance metadata for its join: %w", err)
		}
		instance = id
	}
	if instance == "" {
		return "", errors.New("--instance-id: is required to join with GPUFLEET_JOIN_TOKEN (env GPUFLEET_INSTANCE_ID, or --imds to read it from instance metadata)")
	}
	cl := httpcp.New(c.Server, c.JoinToken, httpcp.Options{HTTPClient: hc})
	wait := time.Second
	for {
		resp, err := cl.Join(ctx, instance)
		var he *httpcp.Error
		switch {
		case err == nil:
			if err := writeSecret(path, resp.Token); err != nil {
				return "", err
			}
			log.Info("joined the server", "node_id", resp.NodeID, "instance", instance)
			return resp.Token, nil
		case errors.As(err, &he) && he.Status != http.StatusConflict && he.Status < 500:
			return "", fmt.Errorf("joining with GPUFLEET_JOIN_TOKEN: %w", err)
		}
		log.Warn("joining the server, retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
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
