package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Projects lists the projects the caller holds a role in.
func (c *Client) Projects(ctx context.Context) ([]api.ProjectView, error) {
	var out api.ProjectList
	if _, err := c.do(ctx, "GET", "/v1/projects", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Projects, nil
}

// Grants lists every grant (admins only).
func (c *Client) Grants(ctx context.Context) ([]model.Grant, error) {
	var out api.GrantList
	if _, err := c.do(ctx, "GET", "/v1/grants", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Grants, nil
}

// Grant gives a user a role in a project; the result carries the
// server's warnings about it.
func (c *Client) Grant(ctx context.Context, g model.Grant) (*api.GrantResult, error) {
	body, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	var out api.GrantResult
	if _, err := c.do(ctx, "PUT", "/v1/grants", hdr, bytes.NewReader(body), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeGrant removes a user's role in a project.
func (c *Client) RevokeGrant(ctx context.Context, user, project string) error {
	resp, err := c.do(ctx, "DELETE", "/v1/grants/"+url.PathEscape(user)+"/"+url.PathEscape(project), nil, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Audit reads up to limit audit entries after sequence number after
// (limit ≤ 0: all).
func (c *Client) Audit(ctx context.Context, after uint64, limit int) ([]*model.AuditEntry, error) {
	q := url.Values{}
	q.Set("after", fmt.Sprint(after))
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	var out api.AuditList
	if _, err := c.do(ctx, "GET", "/v1/audit?"+q.Encode(), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// RotateToken replaces the client's own token; the client uses the new
// secret from then on.
func (c *Client) RotateToken(ctx context.Context) (*api.TokenCreated, error) {
	var out api.TokenCreated
	if _, err := c.do(ctx, "POST", "/v1/tokens/rotate", nil, nil, &out); err != nil {
		return nil, err
	}
	c.token = out.Secret
	return &out, nil
}
