// Package client is the Go client of gpufleet's HTTP API, used by the CLI.
// Errors from the server come back as *api.Problem, with every invalid field.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/endpoints"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Client calls a gpufleet server, or the leader among several. It is safe
// for concurrent use.
type Client struct {
	servers *endpoints.Set
	token   string
	// busyWait and onBusy: see SetBusyWait and OnBusy.
	busyWait time.Duration
	onBusy   func(Busy)
}

// New returns a client for server (e.g. "http://127.0.0.1:7777", or a
// comma-separated list of replicas: "https://a:7777,https://b:7777", of
// which it finds and remembers the leader) with a bearer token. hc may be
// nil for a default client.
func New(server, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // the server is named explicitly; never route it through a proxy
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return &Client{servers: endpoints.New(server, hc), token: token, busyWait: DefaultBusyWait}
}

// Server returns the server URL: the one last known to lead.
func (c *Client) Server() string { return c.servers.Current() }

func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, body io.Reader, out any) (*http.Response, error) {
	first, err := http.NewRequestWithContext(ctx, method, c.servers.Current()+path, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	if s, ok := body.(interface{ Size() int64 }); ok && first.ContentLength == 0 {
		first.ContentLength = s.Size() // a streamed body of known length
	}
	for k, v := range hdr {
		first.Header[k] = v
	}
	if c.token != "" {
		first.Header.Set("Authorization", "Bearer "+c.token)
	}
	sent := false
	build := func(base string) (*http.Request, error) {
		req := first
		if sent { // another server: the same request, its body from the start
			req = first.Clone(ctx)
			if first.GetBody != nil {
				req.Body, _ = first.GetBody()
			}
		}
		sent = true
		u, err := url.Parse(base + path)
		if err != nil {
			return nil, fmt.Errorf("building request: %w", err)
		}
		req.URL, req.Host = u, u.Host
		return req, nil
	}
	// A busy server's refusal (it did nothing) is waited out and the
	// request sent again, the same (a submission with its idempotency
	// key), within c.busyWait; a streamed body cannot be sent twice.
	giveUp := time.Now().Add(c.busyWait)
	resp, err := c.servers.Do(build)
	for try := 1; err == nil; try++ {
		wait, busy := busyWait(resp, try-1)
		if !busy || body != nil && first.GetBody == nil {
			break
		}
		if dl, ok := ctx.Deadline(); time.Now().Add(wait).After(giveUp) || ok && time.Now().Add(wait).After(dl) {
			break
		}
		p := decodeProblem(resp)
		resp.Body.Close()
		if c.onBusy != nil {
			c.onBusy(Busy{Method: method, Path: path, Status: resp.StatusCode, Detail: p.Error(), Try: try, Wait: wait})
		}
		if err = sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("waiting out a busy gpufleet server at %s: %w (last answer: %v)", c.Server(), err, p)
		}
		resp, err = c.servers.Do(build)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("calling gpufleet server at %s: %w", c.Server(), err)
		}
		return nil, &UnreachableError{Server: c.Server(), Err: err}
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return resp, decodeProblem(resp)
	}
	if out == nil {
		return resp, nil // the caller reads and closes the body
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp, fmt.Errorf("decoding %s %s response: %w", method, path, err)
	}
	return resp, nil
}

func decodeProblem(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p := &api.Problem{}
	if err := json.Unmarshal(data, p); err != nil || p.Status == 0 {
		return &api.Problem{Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode, Detail: strings.TrimSpace(string(data))}
	}
	return p
}

// UnreachableError says the server could not be reached at all (refused,
// unresolvable, timed out) — no HTTP answer came back.
type UnreachableError struct {
	Server string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("calling gpufleet server at %s (is it running? start one here with `gpufleet up`, or check the context with `gpufleet config get-contexts`): %v", e.Server, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// StatusOf returns the HTTP status of an API error, or 0.
func StatusOf(err error) int {
	var p *api.Problem
	if errors.As(err, &p) {
		return p.Status
	}
	return 0
}

// SubmitOptions tune SubmitJob.
type SubmitOptions struct {
	// YAML says the manifest is YAML rather than JSON.
	YAML bool
	// IdempotencyKey makes retries return the first submission's job.
	IdempotencyKey string
}

// SubmitJob sends a Job manifest and returns the new (or, for a repeated
// idempotency key, the existing) job.
func (c *Client) SubmitJob(ctx context.Context, manifest []byte, opts SubmitOptions) (*api.JobView, error) {
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	if opts.YAML {
		hdr.Set("Content-Type", "application/yaml")
	}
	if opts.IdempotencyKey != "" {
		hdr.Set(api.IdempotencyHeader, opts.IdempotencyKey)
	}
	var v api.JobView
	if _, err := c.do(ctx, "POST", "/v1/jobs", hdr, bytes.NewReader(manifest), &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Jobs lists jobs, newest first.
func (c *Client) Jobs(ctx context.Context, states []string, limit int) ([]*model.Job, error) {
	return c.ListJobs(ctx, ListOptions{States: states, Limit: limit})
}

// ListOptions select jobs for ListJobs; zero values select everything.
type ListOptions struct {
	States []string
	// Array selects the tasks of one array job.
	Array string
	// Project, User and Queue select jobs of that project, submitter, queue.
	Project, User, Queue string
	Limit                int
}

// ListJobs returns matching jobs, newest first.
func (c *Client) ListJobs(ctx context.Context, o ListOptions) ([]*model.Job, error) {
	out, err := c.listJobs(ctx, o, nil)
	return out.Jobs, err
}

// JobSummaries returns matching jobs, newest first, with each one's cost
// and efficiency (api.JobList.Summaries): one request for a table.
func (c *Client) JobSummaries(ctx context.Context, o ListOptions) (api.JobList, error) {
	return c.listJobs(ctx, o, url.Values{"summary": {"true"}})
}

func (c *Client) listJobs(ctx context.Context, o ListOptions, q url.Values) (api.JobList, error) {
	if q == nil {
		q = url.Values{}
	}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if o.Array != "" {
		q.Set("array", o.Array)
	}
	for k, v := range map[string]string{"project": o.Project, "user": o.User, "queue": o.Queue} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out api.JobList
	if _, err := c.do(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, nil, &out); err != nil {
		return api.JobList{}, err
	}
	return out, nil
}

// Job returns one job with its attempts.
func (c *Client) Job(ctx context.Context, id string) (*api.JobView, error) {
	var v api.JobView
	if _, err := c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Cancel asks the server to cancel a job.
func (c *Client) Cancel(ctx context.Context, id string) (*api.JobView, error) {
	var v api.JobView
	if _, err := c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// LogOptions select a log.
type LogOptions struct {
	Attempt int // 0: latest
	Rank    int
	Follow  bool
	Offset  int64
}

// Logs copies a replica's log to w; with Follow it returns when the attempt
// ends. It returns the attempt number served.
func (c *Client) Logs(ctx context.Context, id string, o LogOptions, w io.Writer) (int, error) {
	q := url.Values{}
	if o.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(o.Attempt))
	}
	if o.Rank > 0 {
		q.Set("rank", strconv.Itoa(o.Rank))
	}
	if o.Offset > 0 {
		q.Set("offset", strconv.FormatInt(o.Offset, 10))
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil, nil, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	attempt, _ := strconv.Atoi(resp.Header.Get("X-Gpufleet-Attempt"))
	if _, err := io.Copy(w, resp.Body); err != nil {
		return attempt, fmt.Errorf("reading log: %w", err)
	}
	return attempt, nil
}

// Nodes lists the nodes.
func (c *Client) Nodes(ctx context.Context) (api.NodeList, error) {
	var out api.NodeList
	_, err := c.do(ctx, "GET", "/v1/nodes", nil, nil, &out)
	return out, err
}

// Unavailable lists the offers and pool regions providers cannot sell now.
func (c *Client) Unavailable(ctx context.Context) ([]model.Unavailable, error) {
	var out api.UnavailableList
	if _, err := c.do(ctx, "GET", "/v1/offers/unavailable", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Unavailable, nil
}

// Offers queries the catalog with the parameters of GET /v1/offers: a page
// of offers and how many match in all.
func (c *Client) Offers(ctx context.Context, q url.Values) (api.OfferList, error) {
	var out api.OfferList
	_, err := c.do(ctx, "GET", "/v1/offers?"+q.Encode(), nil, nil, &out)
	return out, err
}

// Version returns the server's version.
func (c *Client) Version(ctx context.Context) (api.VersionInfo, error) {
	var out api.VersionInfo
	_, err := c.do(ctx, "GET", "/v1/version", nil, nil, &out)
	return out, err
}

// CreateToken creates a token and returns it with its secret.
func (c *Client) CreateToken(ctx context.Context, req api.TokenCreate) (*api.TokenCreated, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	var out api.TokenCreated
	if _, err := c.do(ctx, "POST", "/v1/tokens", hdr, bytes.NewReader(body), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tokens lists unexpired tokens.
func (c *Client) Tokens(ctx context.Context) ([]*model.Token, error) {
	var out api.TokenList
	if _, err := c.do(ctx, "GET", "/v1/tokens", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// RevokeToken revokes a token by id.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	resp, err := c.do(ctx, "DELETE", "/v1/tokens/"+url.PathEscape(id), nil, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// UploadArchive uploads a packed working directory (internal/archive.Pack)
// for project ("" is the default project: only that project's jobs may
// name it) and returns its content address; digest, when set, is checked
// on arrival.
func (c *Client) UploadArchive(ctx context.Context, r io.Reader, project, digest string) (string, error) {
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/gzip")
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	if digest != "" {
		q.Set("digest", digest)
	}
	path := "/v1/archives"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out api.ArchiveUploaded
	if _, err := c.do(ctx, "POST", path, hdr, r, &out); err != nil {
		return "", err
	}
	return out.Digest, nil
}
