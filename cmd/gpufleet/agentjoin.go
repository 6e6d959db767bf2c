package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/gpufleet/gpufleet/internal/agentapi/httpcp"
	"github.com/gpufleet/gpufleet/internal/provider/aws/imds"
)

// joinedTokenFile is where, in the agent's data dir, a launched instance
// keeps the agent token its join token was exchanged for (mode 0600).
const joinedTokenFile = "agent.token"

// agentToken is the token the agent authenticates with: --token, else the
// one a join stored in the data dir, else the one the join token
// (GPUFLEET_JOIN_TOKEN, from the env file an instance's user-data writes)
// is exchanged for now for this instance (--instance-id, or instance
// metadata with --imds), which is then stored (httpcp.JoinAndStore).
func agentToken(ctx context.Context, c *agentConfig, hc *http.Client, log *slog.Logger) (string, error) {
	if c.Token != "" {
		return c.Token, nil
	}
	file := filepath.Join(c.DataDir, joinedTokenFile)
	_, stored := os.Stat(file)
	instance, joining := c.InstanceID, stored != nil && c.JoinToken != ""
	if instance == "" && c.IMDS && joining {
		id, err := imds.New(imds.Options{Endpoint: c.IMDSEndpoint}).InstanceID(ctx)
		if err != nil {
			return "", fmt.Errorf("reading this instance's id from instance metadata for its join: %w", err)
		}
		instance = id
	}
	if instance == "" && joining {
		return "", errors.New("--instance-id: is required to join with GPUFLEET_JOIN_TOKEN (env GPUFLEET_INSTANCE_ID, or --imds to read it from instance metadata)")
	}
	return httpcp.JoinAndStore(ctx, c.Server, httpcp.JoinOptions{JoinToken: c.JoinToken, InstanceID: instance,
		TokenFile: file, Client: httpcp.Options{HTTPClient: hc}, Logger: log})
}
