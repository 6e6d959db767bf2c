// Package imds reads an EC2 instance's spot interruption and rebalance
// notices from the instance metadata service, IMDSv2 only: every read
// carries a session token got by PUT /latest/api/token.
//
// A Watcher polls /latest/meta-data/spot/instance-action and
// /latest/meta-data/events/recommendations/rebalance and reports the
// outstanding notices as agentapi.Notice values, so the agent carries them
// to the server on its next sync. It owns its session token and nothing
// else; it writes nothing.
//
// Invariants:
//   - A notice, once seen, keeps the deadline and issue time first read:
//     the metadata service repeats it until the instance stops, and a
//     restarted poll must not move the deadline.
//   - 404 on a notice path means no notice; 401 renews the token and
//     retries once; any other failure is an error of that poll, and the
//     notices already seen stand.
package imds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
)

// DefaultEndpoint is the instance metadata service's IPv4 address.
const DefaultEndpoint = "http://169.254.169.254"

// Source is the Notice.Source of notices from this package.
const Source = "aws-imds"

// Metadata paths.
const (
	tokenPath          = "/latest/api/token"
	instanceActionPath = "/latest/meta-data/spot/instance-action"
	rebalancePath      = "/latest/meta-data/events/recommendations/rebalance"
	instanceIDPath     = "/latest/meta-data/instance-id"
)

// Options configure a Client. Zero fields take the defaults noted.
type Options struct {
	// Endpoint is the metadata service's base URL. Default DefaultEndpoint.
	Endpoint string
	// HTTPClient makes the calls. Default: one with a 2s timeout, which
	// also bounds the wait off EC2 where nothing answers.
	HTTPClient *http.Client
	// TokenTTL is the session token's lifetime. Default 6h (the most the
	// service allows).
	TokenTTL time.Duration
	// Clock decides when a token is due for renewal and stamps first
	// sightings. Default clock.Real.
	Clock clock.Clock
}

// Client reads instance metadata with IMDSv2 session tokens. It is safe for
// concurrent use.
type Client struct {
	opts Options

	mu       sync.Mutex
	token    string
	tokenExp time.Time
}

// New returns a client; it makes no call until asked.
func New(opts Options) *Client {
	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}
	opts.Endpoint = strings.TrimRight(opts.Endpoint, "/")
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 2 * time.Second}
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = 6 * time.Hour
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	return &Client{opts: opts}
}

// sessionToken returns a valid token, asking for one when there is none or
// it has under a minute left (or when renew is set).
func (c *Client) sessionToken(ctx context.Context, renew bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Clock.Now()
	if !renew && c.token != "" && now.Add(time.Minute).Before(c.tokenExp) {
		return c.token, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.opts.Endpoint+tokenPath, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(int(c.opts.TokenTTL/time.Second)))
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("getting an IMDSv2 session token: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("getting an IMDSv2 session token: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("getting an IMDSv2 session token: %s", resp.Status)
	}
	c.token, c.tokenExp = strings.TrimSpace(string(body)), now.Add(c.opts.TokenTTL)
	return c.token, nil
}

// errNotFound: the path has no value (no notice).
var errNotFound = errors.New("not found")

// get reads a metadata path with the session token, renewing the token once
// if the service refuses it.
func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		tok, err := c.sessionToken(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.opts.Endpoint+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-aws-ec2-metadata-token", tok)
		resp, err := c.opts.HTTPClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", path, err)
		case resp.StatusCode == http.StatusOK:
			return body, nil
		case resp.StatusCode == http.StatusNotFound:
			return nil, errNotFound
		case resp.StatusCode == http.StatusUnauthorized && attempt == 0:
			continue // the token expired or the service restarted
		default:
			return nil, fmt.Errorf("reading %s: %s", path, resp.Status)
		}
	}
}

// InstanceID returns the instance's id.
func (c *Client) InstanceID(ctx context.Context) (string, error) {
	b, err := c.get(ctx, instanceIDPath)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// InstanceAction is a spot interruption notice.
type InstanceAction struct {
	// Action is terminate, stop or hibernate.
	Action string `json:"action"`
	// Time is when the action happens.
	Time time.Time `json:"time"`
}

// SpotAction returns the spot interruption notice, or nil when there is
// none.
func (c *Client) SpotAction(ctx context.Context) (*InstanceAction, error) {
	b, err := c.get(ctx, instanceActionPath)
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var a InstanceAction
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", instanceActionPath, err)
	}
	if a.Time.IsZero() || a.Action == "" {
		return nil, fmt.Errorf("decoding %s: %q has no action or time", instanceActionPath, b)
	}
	return &a, nil
}

// Rebalance returns when a rebalance recommendation was issued, or the zero
// time when there is none.
func (c *Client) Rebalance(ctx context.Context) (time.Time, error) {
	b, err := c.get(ctx, rebalancePath)
	if errors.Is(err, errNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	var r struct {
		NoticeTime time.Time `json:"noticeTime"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.NoticeTime.IsZero() {
		return time.Time{}, fmt.Errorf("decoding %s: %q is not {\"noticeTime\": …}", rebalancePath, b)
	}
	return r.NoticeTime, nil
}

// Watcher polls for notices. Use it from one goroutine (Watch).
type Watcher struct {
	c        *Client
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger

	instanceID string
	spot       *agentapi.Notice
	rebalance  *agentapi.Notice
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Interval between polls. Default 5s, as AWS recommends for the
	// two-minute spot warning.
	Interval time.Duration
	// Logger receives failed polls. Default: discard.
	Logger *slog.Logger
}

// NewWatcher returns a watcher reading through c.
func NewWatcher(c *Client, opts WatcherOptions) *Watcher {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{c: c, interval: opts.Interval, clock: c.opts.Clock, log: opts.Logger}
}

// Poll reads both notice paths once and returns the outstanding notices,
// interruption first. A failed read keeps what was seen before and is
// returned as the error alongside it.
func (w *Watcher) Poll(ctx context.Context) ([]agentapi.Notice, error) {
	var errs []error
	if w.instanceID == "" {
		id, err := w.c.InstanceID(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		w.instanceID = id
	}
	if a, err := w.c.SpotAction(ctx); err != nil {
		errs = append(errs, err)
	} else if a != nil && w.spot == nil {
		issued := w.clock.Now().UTC()
		if lead := 2 * time.Minute; a.Time.Sub(issued) > lead {
			issued = a.Time.Add(-lead) // EC2 warns two minutes ahead
		}
		w.spot = &agentapi.Notice{Kind: agentapi.NoticeInterruption, Source: Source, IssuedAt: issued, Deadline: a.Time.UTC(), Action: a.Action}
	}
	if at, err := w.c.Rebalance(ctx); err != nil {
		errs = append(errs, err)
	} else if !at.IsZero() && w.rebalance == nil {
		w.rebalance = &agentapi.Notice{Kind: agentapi.NoticeRebalance, Source: Source, IssuedAt: at.UTC()}
	}
	var out []agentapi.Notice
	for _, n := range []*agentapi.Notice{w.spot, w.rebalance} {
		if n != nil {
			c := *n
			c.InstanceID = w.instanceID
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

// Watch polls every interval until ctx ends, calling report with the
// outstanding notices whenever they change (never with an empty set). It
// implements the agent's notice source.
func (w *Watcher) Watch(ctx context.Context, report func([]agentapi.Notice)) {
	var last []agentapi.Notice
	for {
		got, err := w.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("reading instance metadata notices", "err", err)
		}
		if len(got) > 0 && !slices.Equal(got, last) {
			report(slices.Clone(got))
			last = got
		}
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(w.interval):
		}
	}
}
