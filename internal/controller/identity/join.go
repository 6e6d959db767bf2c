package identity

import (
	"context"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// MintJoinToken mints a one-time join token for node, an instance being
// launched into pool, valid for ttl. It returns once the token is durable,
// so a server restarted after the secret left (in the instance's
// user-data) still knows it.
func (id *Identity) MintJoinToken(ctx context.Context, pool, node string, ttl time.Duration) (string, error) {
	tok, secret, err := auth.New(model.TokenJoin, node, pool, id.cfg.Clock.Now(), ttl)
	if err != nil {
		return "", fmt.Errorf("minting the join token of node %s: %w", node, err)
	}
	id.mu.Lock()
	id.putLocked(tok)
	wait := id.cfg.Committer.Commit(&store.Batch{Tokens: []*model.Token{tok}})
	id.mu.Unlock()
	if err := wait(ctx); err != nil {
		return "", fmt.Errorf("recording the join token of node %s: %w", node, err)
	}
	return secret, nil
}

// ExchangeJoin spends the join token whose secret this is and mints, in
// the same commit, an agent token for its node (the join token's
// subject), valid for agentTTL; it returns that token and its secret. A
// join token is spent once: a second exchange, like an expired or unknown
// token, fails with ErrUnauthenticated. check is asked first, with the
// join token, whether this caller may exchange it (the controller checks
// the instance id); its error refuses the exchange and leaves the token
// unspent.
func (id *Identity) ExchangeJoin(ctx context.Context, secret string, agentTTL time.Duration, check func(join *model.Token) error) (*model.Token, string, error) {
	join, err := id.Authenticate(secret)
	if err != nil || join.Kind != model.TokenJoin {
		return nil, "", fmt.Errorf("exchanging a join token: it is unknown, expired or already used: %w", ErrUnauthenticated)
	}
	if err := check(join); err != nil {
		return nil, "", err
	}
	tok, agentSecret, err := auth.New(model.TokenAgent, join.Subject, "joined "+join.Name, id.cfg.Clock.Now(), agentTTL)
	if err != nil {
		return nil, "", err
	}
	id.mu.Lock()
	cur := id.byID[join.ID]
	if cur == nil || !cur.Valid(id.cfg.Clock.Now()) {
		id.mu.Unlock() // spent by a concurrent exchange
		return nil, "", fmt.Errorf("exchanging a join token: it is unknown, expired or already used: %w", ErrUnauthenticated)
	}
	spent := revoked(cur)
	id.putLocked(spent)
	id.putLocked(tok)
	wait := id.cfg.Committer.Commit(&store.Batch{Tokens: []*model.Token{spent, tok}})
	id.mu.Unlock()
	if err := wait(ctx); err != nil {
		return nil, "", fmt.Errorf("recording the joined node's agent token: %w", err)
	}
	return tok, agentSecret, nil
}
