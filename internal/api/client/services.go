package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
)

// ApplyService creates or updates a service from a Service manifest (JSON
// or YAML, as contentType says).
func (c *Client) ApplyService(ctx context.Context, manifest []byte, contentType string) (*api.ServiceView, error) {
	var out api.ServiceView
	hdr := http.Header{"Content-Type": {contentType}}
	if _, err := c.do(ctx, "POST", "/v1/services", hdr, bytes.NewReader(manifest), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Services lists the services the caller may read.
func (c *Client) Services(ctx context.Context) ([]api.ServiceView, error) {
	var out api.ServiceList
	if _, err := c.do(ctx, "GET", "/v1/services", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Services, nil
}

// Service returns one service.
func (c *Client) Service(ctx context.Context, name string) (*api.ServiceView, error) {
	var out api.ServiceView
	if _, err := c.do(ctx, "GET", "/v1/services/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteService deletes a service; its replicas are cancelled.
func (c *Client) DeleteService(ctx context.Context, name string) error {
	resp, err := c.do(ctx, "DELETE", "/v1/services/"+url.PathEscape(name), nil, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
