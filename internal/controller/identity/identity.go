// Package identity is the control plane's record of who is calling: API,
// agent and job tokens, dashboard sessions (which keep a token's hash), and
// the users' grants in projects. It owns that state and its lock, apart
// from the scheduler's, so authenticating a request never waits for a
// scheduling pass, a plan commit or an agent sync.
//
// Every change is in memory first, then committed through the shared
// store.Committer while the lock is held, so changes reach the store in the
// order they were made; methods that answer an API request return once the
// change is durable. Job tokens are minted and revoked by the scheduler
// inside its own batches (MintJobToken, RevokeJob), so a job's end and its
// tokens' revocation are one commit. A token is immutable apart from its
// revocation, which is never undone, so the order of two batches that both
// write one token does not matter (the store keeps a revoked token revoked).
package identity

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ErrUnauthenticated: the token is unknown, expired or revoked.
var ErrUnauthenticated = errors.New("unauthenticated")

// Config wires an Identity.
type Config struct {
	Committer store.Committer // required
	Clock     clock.Clock     // clock.Real{} when nil
	// Redactor, when set, is given every live job token's secret, for the
	// log handler's scrubbing.
	Redactor *secrets.Redactor
}

// Identity holds tokens, the job-token secrets of live attempts, and
// grants. Its methods are safe for concurrent use.
type Identity struct {
	cfg Config

	// mu guards every field below; readers (Authenticate, RoleIn) share it.
	mu     sync.RWMutex
	byHash map[string]*model.Token // by hex hash
	byID   map[string]*model.Token
	// jobTokens indexes the unrevoked job tokens by job id.
	jobTokens map[string]map[string]bool
	// attempts holds the job-token secret minted for each live attempt;
	// it never reaches the store.
	attempts map[string]string
	grants   map[grantKey]model.Grant
}

// grantKey names one grant in memory.
type grantKey struct{ user, project string }

// New returns an Identity holding the stored tokens and grants.
func New(cfg Config, tokens []*model.Token, grants []model.Grant) *Identity {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	id := &Identity{
		cfg:       cfg,
		byHash:    make(map[string]*model.Token, len(tokens)),
		byID:      make(map[string]*model.Token, len(tokens)),
		jobTokens: map[string]map[string]bool{},
		attempts:  map[string]string{},
		grants:    make(map[grantKey]model.Grant, len(grants)),
	}
	for _, t := range tokens {
		id.putLocked(t)
	}
	for _, g := range grants {
		id.grants[grantKey{g.User, g.Project}] = g
	}
	return id
}

func (id *Identity) putLocked(t *model.Token) {
	id.byHash[hex.EncodeToString(t.Hash)] = t
	id.byID[t.ID] = t
	if t.Kind != model.TokenJob {
		return
	}
	ids := id.jobTokens[t.Subject]
	switch {
	case !t.Revoked && ids == nil:
		id.jobTokens[t.Subject] = map[string]bool{t.ID: true}
	case !t.Revoked:
		ids[t.ID] = true
	default:
		delete(ids, t.ID)
		if len(ids) == 0 {
			delete(id.jobTokens, t.Subject)
		}
	}
}

// Authenticate returns the valid token whose secret this is.
func (id *Identity) Authenticate(secret string) (*model.Token, error) {
	return id.AuthenticateHash(auth.Hash(secret))
}

// AuthenticateHash returns the valid token whose secret hashes to hash
// (auth.Hash): dashboard sessions keep the hash, never the secret.
func (id *Identity) AuthenticateHash(hash []byte) (*model.Token, error) {
	now := id.cfg.Clock.Now()
	id.mu.RLock()
	t, ok := id.byHash[hex.EncodeToString(hash)]
	id.mu.RUnlock()
	if !ok || !t.Valid(now) {
		return nil, ErrUnauthenticated
	}
	return t, nil
}

// CreateToken mints and records a token; the secret is returned only here,
// once the token is durable.
func (id *Identity) CreateToken(ctx context.Context, r model.TokenRequest) (*model.Token, string, error) {
	if r.Kind == model.TokenJob {
		return nil, "", fmt.Errorf("job tokens are minted per attempt, not on request: %w", model.ErrConflict)
	}
	tok, secret, err := auth.New(r.Kind, r.Subject, r.Name, id.cfg.Clock.Now(), r.TTL)
	if err != nil {
		return nil, "", err
	}
	tok.Admin = r.Admin
	id.mu.Lock()
	id.putLocked(tok)
	wait := id.cfg.Committer.Commit(&store.Batch{Tokens: []*model.Token{tok}})
	id.mu.Unlock()
	if err := wait(ctx); err != nil {
		return nil, "", fmt.Errorf("recording token: %w", err)
	}
	return tok, secret, nil
}

// Tokens lists tokens that have not expired, oldest first.
func (id *Identity) Tokens() []*model.Token {
	now := id.cfg.Clock.Now()
	id.mu.RLock()
	out := make([]*model.Token, 0, len(id.byID))
	for _, t := range id.byID {
		if now.Before(t.ExpiresAt) {
			out = append(out, t)
		}
	}
	id.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].CreatedAt.Before(out[j].CreatedAt) || out[i].CreatedAt.Equal(out[j].CreatedAt) && out[i].ID < out[j].ID
	})
	return out
}

// RevokeToken makes a token unusable at once.
func (id *Identity) RevokeToken(ctx context.Context, tokenID string) error {
	id.mu.Lock()
	t, ok := id.byID[tokenID]
	if !ok {
		id.mu.Unlock()
		return fmt.Errorf("token %s: %w", tokenID, model.ErrNotFound)
	}
	t = revoked(t)
	id.putLocked(t)
	wait := id.cfg.Committer.Commit(&store.Batch{Tokens: []*model.Token{t}})
	id.mu.Unlock()
	return wait(ctx)
}

// RotateToken mints a token like tokenID's (kind, subject, name, admin),
// valid for as long as tokenID was meant to live, and revokes tokenID, in
// one batch.
func (id *Identity) RotateToken(ctx context.Context, tokenID string) (*model.Token, string, error) {
	id.mu.RLock()
	old, ok := id.byID[tokenID]
	id.mu.RUnlock()
	if !ok {
		return nil, "", fmt.Errorf("token %s: %w", tokenID, model.ErrNotFound)
	}
	if old.Kind == model.TokenJob {
		return nil, "", fmt.Errorf("job tokens end with their job: %w", model.ErrConflict)
	}
	tok, secret, err := auth.New(old.Kind, old.Subject, old.Name, id.cfg.Clock.Now(), old.ExpiresAt.Sub(old.CreatedAt))
	if err != nil {
		return nil, "", err
	}
	tok.Admin = old.Admin
	id.mu.Lock()
	gone := revoked(id.byID[tokenID])
	id.putLocked(gone)
	id.putLocked(tok)
	wait := id.cfg.Committer.Commit(&store.Batch{Tokens: []*model.Token{gone, tok}})
	id.mu.Unlock()
	if err := wait(ctx); err != nil {
		return nil, "", fmt.Errorf("recording rotated token: %w", err)
	}
	return tok, secret, nil
}

func revoked(t *model.Token) *model.Token {
	c := *t
	c.Revoked = true
	return &c
}

// MintJobToken returns the job-token secret of a live attempt of job,
// minting a token valid for ttl when the attempt has none yet (a new
// attempt, or any after a restart: secrets are never stored). A minted
// token is added to b, which the caller commits before the secret leaves
// the server.
func (id *Identity) MintJobToken(jobID, attemptID string, ttl time.Duration, b *store.Batch) (string, error) {
	id.mu.RLock()
	secret, ok := id.attempts[attemptID]
	id.mu.RUnlock()
	if ok {
		return secret, nil
	}
	tok, secret, err := auth.New(model.TokenJob, jobID, attemptID, id.cfg.Clock.Now(), ttl)
	if err != nil {
		return "", fmt.Errorf("minting job token: %w", err)
	}
	id.mu.Lock()
	if s, ok := id.attempts[attemptID]; ok {
		id.mu.Unlock() // minted meanwhile
		return s, nil
	}
	id.putLocked(tok)
	id.attempts[attemptID] = secret
	id.mu.Unlock()
	b.Tokens = append(b.Tokens, tok)
	id.cfg.Redactor.Add(secret)
	return secret, nil
}

// EndAttempt forgets an ended attempt's job-token secret (its token stays
// valid until RevokeJob, since the job's other attempts may follow).
func (id *Identity) EndAttempt(attemptID string) {
	id.mu.Lock()
	s, ok := id.attempts[attemptID]
	delete(id.attempts, attemptID)
	id.mu.Unlock()
	if ok {
		id.cfg.Redactor.Remove(s)
	}
}

// RevokeJob revokes every token of a finished job into b, which the caller
// commits with the job's end.
func (id *Identity) RevokeJob(jobID string, b *store.Batch) {
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, tid := range slices.Sorted(maps.Keys(id.jobTokens[jobID])) {
		t := revoked(id.byID[tid])
		id.putLocked(t)
		b.Tokens = append(b.Tokens, t)
	}
}
