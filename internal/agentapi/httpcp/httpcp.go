// Package httpcp is the agent protocol over HTTP(S): an agentapi.ControlPlane
// that a remote `gpufleet agent` uses to talk to the server's /v1/agent/
// routes with its agent token.
//
// Every call has its own deadline (a long poll gets its wait on top), so a
// server that vanishes without closing the connection — a killed process on
// another machine, a dropped network — never stalls the agent: the call
// fails, the agent backs off and retries, and its replicas keep running.
package httpcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/api/endpoints"
)

// Paths of the agent protocol, relative to the server URL.
const (
	JoinPath     = "/v1/agent/join"
	RegisterPath = "/v1/agent/register"
	SyncPath     = "/v1/agent/sync"
	LogsPath     = "/v1/agent/logs"
	// ArchivesPath is followed by a content address.
	ArchivesPath = "/v1/archives/"
)

// ArchiveTimeout bounds an archive download.
const ArchiveTimeout = 10 * time.Minute

// DefaultTimeout bounds a call that does not wait on the server.
const DefaultTimeout = 30 * time.Second

// Options tune a Client; the zero value means defaults.
type Options struct {
	// HTTPClient sends the requests; nil means one that never uses a proxy
	// and keeps a few connections alive.
	HTTPClient *http.Client
	// Timeout bounds each call, on top of a sync's long-poll wait
	// (DefaultTimeout).
	Timeout time.Duration
}

// Client calls one server with one agent token. It is safe for concurrent
// use.
type Client struct {
	servers *endpoints.Set
	token   string
	timeout time.Duration
}

var _ agentapi.ControlPlane = (*Client)(nil)

// New returns a client of the server at base (e.g. "https://fleet:7777",
// or several replicas comma-separated, of which it follows the leader)
// that authenticates with token.
func New(base, token string, opts Options) *Client {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // the server is named explicitly
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{servers: endpoints.New(base, hc), token: token, timeout: timeout}
}

// Error is a refusal from the server: its status and what it said.
type Error struct {
	Status int
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("server answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Detail)
}

// Register announces the node.
func (c *Client) Register(ctx context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error) {
	var resp agentapi.RegisterResponse
	err := c.call(ctx, RegisterPath, c.timeout, r, &resp)
	return resp, err
}

// Sync reports statuses and long-polls for the desired set. A 404 means the
// server does not know the node: the error matches agentapi.ErrUnknownNode.
func (c *Client) Sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, error) {
	var resp agentapi.SyncResponse
	err := c.call(ctx, SyncPath, c.timeout+req.Wait.D(), req, &resp)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		err = fmt.Errorf("%w: %w", agentapi.ErrUnknownNode, err)
	}
	return resp, err
}

// AppendLog ships a chunk of output.
func (c *Client) AppendLog(ctx context.Context, ch agentapi.LogChunk) (agentapi.LogAck, error) {
	var ack agentapi.LogAck
	err := c.call(ctx, LogsPath, c.timeout, ch, &ack)
	return ack, err
}

// FetchArchive downloads an uploaded working directory. The caller closes
// it and verifies its digest.
func (c *Client) FetchArchive(ctx context.Context, digest string) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, ArchiveTimeout)
	resp, err := c.servers.Do(func(base string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+ArchivesPath+digest, nil)
		if err != nil {
			return nil, fmt.Errorf("building archive request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		return req, nil
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetching archive %s: %w", digest, err)
	}
	if resp.StatusCode >= 400 {
		defer cancel()
		defer resp.Body.Close()
		return nil, fmt.Errorf("fetching archive %s: %w", digest, readError(resp))
	}
	return cancelOnClose{resp.Body, cancel}, nil
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// call POSTs in as JSON and decodes the answer into out.
func (c *Client) call(ctx context.Context, path string, timeout time.Duration, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %s request: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.servers.Do(func(base string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("building %s request: %w", path, err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.token)
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("calling %s%s: %w", c.servers.Current(), path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("calling %s%s: %w", c.servers.Current(), path, readError(resp))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding %s answer: %w", path, err)
	}
	return nil
}

// Join exchanges the client's token, a launched instance's one-time join
// token, for its node's agent token. A refusal is an *Error with status
// 401 (spent or expired) or 403 (another instance); 409 means the launch
// has not been recorded yet, and the call may be retried.
func (c *Client) Join(ctx context.Context, instanceID string) (agentapi.JoinResponse, error) {
	var resp agentapi.JoinResponse
	err := c.call(ctx, JoinPath, c.timeout, agentapi.JoinRequest{InstanceID: instanceID}, &resp)
	return resp, err
}

// readError turns a refusal into an *Error, keeping the problem's detail.
func readError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p struct {
		Detail string `json:"detail"`
		Errors []struct {
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(data, &p) == nil {
		e.Detail = p.Detail
		for _, fe := range p.Errors {
			e.Detail += fmt.Sprintf("; %s: %s", fe.Path, fe.Message)
		}
		e.Detail = strings.TrimPrefix(e.Detail, "; ")
	} else {
		e.Detail = strings.TrimSpace(string(data))
	}
	if resp.StatusCode == http.StatusUnauthorized {
		e.Detail = "the agent token is unknown, expired or revoked: create one with `gpufleet tokens create NODE --kind agent` and pass it with --token"
	}
	return e
}
