package controller

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrUnauthenticated: the token is unknown, expired or revoked.
var ErrUnauthenticated = errors.New("unauthenticated")

func (c *Controller) putToken(t *model.Token) {
	c.tokens[hex.EncodeToString(t.Hash)] = t
	c.tokenIDs[t.ID] = t
	if t.Kind != model.TokenJob {
		return
	}
	ids := c.jobTokens[t.Subject]
	switch {
	case !t.Revoked && ids == nil:
		c.jobTokens[t.Subject] = map[string]bool{t.ID: true}
	case !t.Revoked:
		ids[t.ID] = true
	default:
		delete(ids, t.ID)
		if len(ids) == 0 {
			delete(c.jobTokens, t.Subject)
		}
	}
}

// Authenticate returns the valid token whose secret this is.
func (c *Controller) Authenticate(secret string) (*model.Token, error) {
	h := hex.EncodeToString(auth.Hash(secret))
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	t, ok := c.tokens[h]
	c.mu.Unlock()
	if !ok || !t.Valid(now) {
		return nil, ErrUnauthenticated
	}
	return t, nil
}

// TokenRequest is model.TokenRequest, declared there so the API and its
// client need not import the controller.
type TokenRequest = model.TokenRequest

// CreateToken mints and records a token; the secret is returned only here.
func (c *Controller) CreateToken(ctx context.Context, r TokenRequest) (*model.Token, string, error) {
	if r.Kind == model.TokenJob {
		return nil, "", fmt.Errorf("job tokens are minted per attempt, not on request: %w", ErrConflict)
	}
	tok, secret, err := auth.New(r.Kind, r.Subject, r.Name, c.cfg.Clock.Now(), r.TTL)
	if err != nil {
		return nil, "", err
	}
	tok.Admin = r.Admin
	c.mu.Lock()
	c.putToken(tok)
	cm := c.com.submit(&store.Batch{Tokens: []*model.Token{tok}})
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return nil, "", fmt.Errorf("recording token: %w", err)
	}
	return tok, secret, nil
}

// Tokens lists tokens that have not expired, oldest first.
func (c *Controller) Tokens() []*model.Token {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*model.Token, 0, len(c.tokenIDs))
	for _, t := range c.tokenIDs {
		if now.Before(t.ExpiresAt) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].CreatedAt.Before(out[j].CreatedAt) || out[i].CreatedAt.Equal(out[j].CreatedAt) && out[i].ID < out[j].ID
	})
	return out
}

// RevokeToken makes a token unusable at once.
func (c *Controller) RevokeToken(ctx context.Context, id string) error {
	c.mu.Lock()
	t, ok := c.tokenIDs[id]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	t = revoked(t)
	c.putToken(t)
	cm := c.com.submit(&store.Batch{Tokens: []*model.Token{t}})
	c.mu.Unlock()
	return cm.wait(ctx)
}

func revoked(t *model.Token) *model.Token {
	c := *t
	c.Revoked = true
	return &c
}

// revokeJobTokensLocked ends every token of a finished job.
func (c *Controller) revokeJobTokensLocked(jobID string, b *store.Batch) {
	ids := slices.Sorted(maps.Keys(c.jobTokens[jobID]))
	for _, id := range ids {
		t := revoked(c.tokenIDs[id])
		c.putToken(t)
		b.Tokens = append(b.Tokens, t)
	}
}
