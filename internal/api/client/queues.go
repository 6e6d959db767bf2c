package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
)

// Queues lists every queue, the implicit default included.
func (c *Client) Queues(ctx context.Context) ([]api.QueueView, error) {
	var out api.QueueList
	if _, err := c.do(ctx, "GET", "/v1/queues", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

// Queue returns one queue.
func (c *Client) Queue(ctx context.Context, name string) (*api.QueueView, error) {
	var out api.QueueView
	if _, err := c.do(ctx, "GET", "/v1/queues/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutQueue creates or replaces a queue from a Queue manifest (JSON or
// YAML, as contentType says).
func (c *Client) PutQueue(ctx context.Context, name string, manifest []byte, contentType string) (*api.QueueView, error) {
	var out api.QueueView
	hdr := http.Header{"Content-Type": {contentType}}
	if _, err := c.do(ctx, "PUT", "/v1/queues/"+url.PathEscape(name), hdr, bytes.NewReader(manifest), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteQueue deletes a queue.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	resp, err := c.do(ctx, "DELETE", "/v1/queues/"+url.PathEscape(name), nil, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Explain says why a job waits.
func (c *Client) Explain(ctx context.Context, id string) (*api.Explanation, error) {
	var out api.Explanation
	if _, err := c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id)+"/explain", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
