package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gitops"
	"github.com/gpufleet/gpufleet/internal/model"
)

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding request: %w", err)
	}
	_, err = c.do(ctx, "POST", path, jsonHeader, bytes.NewReader(body), out)
	return err
}

// Plan diffs documents against the server's current fleet revision.
func (c *Client) Plan(ctx context.Context, req api.FleetRequest) (*api.PlanView, error) {
	var out api.PlanView
	if err := c.post(ctx, "/v1/plan", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Apply records documents as a new fleet revision and applies it.
func (c *Client) Apply(ctx context.Context, req api.FleetRequest) (*api.ApplyView, error) {
	var out api.ApplyView
	if err := c.post(ctx, "/v1/apply", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Rollback re-applies revision req.To as a new revision.
func (c *Client) Rollback(ctx context.Context, req api.RollbackRequest) (*api.ApplyView, error) {
	var out api.ApplyView
	if err := c.post(ctx, "/v1/rollback", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Revisions lists fleet revisions, oldest first.
func (c *Client) Revisions(ctx context.Context) (*api.RevisionList, error) {
	var out api.RevisionList
	if _, err := c.do(ctx, "GET", "/v1/revisions", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Revision returns one fleet revision with its documents.
func (c *Client) Revision(ctx context.Context, n int) (*model.Revision, error) {
	var out model.Revision
	if _, err := c.do(ctx, "GET", fmt.Sprintf("/v1/revisions/%d", n), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GitOps reports the git repository the server follows.
func (c *Client) GitOps(ctx context.Context) (*gitops.Status, error) {
	var out gitops.Status
	if _, err := c.do(ctx, "GET", "/v1/gitops", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Drift reports where the running fleet differs from the declared one.
func (c *Client) Drift(ctx context.Context) (*api.DriftReport, error) {
	var out api.DriftReport
	if _, err := c.do(ctx, "GET", "/v1/drift", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
