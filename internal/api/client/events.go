package client

import (
	"context"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Events lists events with the parameters of GET /v1/events.
func (c *Client) Events(ctx context.Context, q url.Values) (api.EventList, error) {
	var out api.EventList
	_, err := c.do(ctx, "GET", "/v1/events?"+q.Encode(), nil, nil, &out)
	return out, err
}

// InterruptNode injects a spot notice for node id.
func (c *Client) InterruptNode(ctx context.Context, id string) (provider.Notice, error) {
	var out provider.Notice
	_, err := c.do(ctx, "POST", "/v1/nodes/"+url.PathEscape(id)+"/interrupt", nil, nil, &out)
	return out, err
}
