package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
)

func secretsPath(project string) string {
	return "/v1/projects/" + url.PathEscape(project) + "/secrets"
}

// PutSecret writes a project's secret; the server never returns its value.
func (c *Client) PutSecret(ctx context.Context, project, name string, value []byte) (*model.SecretInfo, error) {
	body, err := json.Marshal(api.SecretWrite{Value: string(value)})
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	var out model.SecretInfo
	if _, err := c.do(ctx, "PUT", secretsPath(project)+"/"+url.PathEscape(name), hdr, bytes.NewReader(body), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Secrets lists a project's secrets (names and versions).
func (c *Client) Secrets(ctx context.Context, project string) ([]model.SecretInfo, error) {
	var out api.SecretList
	if _, err := c.do(ctx, "GET", secretsPath(project), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Secrets, nil
}

// DeleteSecret removes a project's secret.
func (c *Client) DeleteSecret(ctx context.Context, project, name string) error {
	resp, err := c.do(ctx, "DELETE", secretsPath(project)+"/"+url.PathEscape(name), nil, nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ResealSecrets re-seals every secret with the server's newest key.
func (c *Client) ResealSecrets(ctx context.Context) (int, error) {
	var out api.ResealResult
	if _, err := c.do(ctx, "POST", "/v1/secrets/reseal", nil, nil, &out); err != nil {
		return 0, err
	}
	return out.Resealed, nil
}
