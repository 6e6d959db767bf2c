package client

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
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

// ProxyEndpoints returns the services' proxy table (a proxy token's
// call): at once when its version is not after, else once it changes or
// the server's wait (25 s) ends.
func (c *Client) ProxyEndpoints(ctx context.Context, after uint64) (model.ProxyTable, error) {
	var out model.ProxyTable
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if _, err := c.do(ctx, "GET", "/v1/proxy/endpoints?"+q.Encode(), nil, nil, &out); err != nil {
		return model.ProxyTable{}, err
	}
	return out, nil
}

// ProxyLoad reports a proxy's load to the server.
func (c *Client) ProxyLoad(ctx context.Context, r model.ProxyReport) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, "POST", "/v1/proxy/load", http.Header{"Content-Type": {"application/json"}}, bytes.NewReader(body), nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ProxyAuthorize asks whether the caller whose bearer secret has SHA-256
// digest may call service: 0, or the status to refuse with.
func (c *Client) ProxyAuthorize(ctx context.Context, service string, digest []byte) (int, error) {
	body, err := json.Marshal(api.ProxyCaller{Service: service, Digest: hex.EncodeToString(digest)})
	if err != nil {
		return 0, err
	}
	var out api.ProxyVerdict
	if _, err := c.do(ctx, "POST", "/v1/proxy/authorize", http.Header{"Content-Type": {"application/json"}}, bytes.NewReader(body), &out); err != nil {
		return 0, err
	}
	return out.Status, nil
}
