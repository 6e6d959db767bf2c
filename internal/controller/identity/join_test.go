package identity

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestJoinTokenExchangesOnce(t *testing.T) {
	t.Parallel()
	id, com, clk, _ := newTest(t)
	ctx := context.Background()
	secret, err := id.MintJoinToken(ctx, "gpu", "n-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(com.Batches()); n != 1 {
		t.Fatalf("minting committed %d batches, want 1 before the secret is returned", n)
	}
	refuse := errors.New("another instance")
	if _, _, err := id.ExchangeJoin(ctx, secret, 24*time.Hour, func(*model.Token) error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("refused check: %v", err)
	}
	var checked *model.Token
	tok, agentSecret, err := id.ExchangeJoin(ctx, secret, 24*time.Hour, func(j *model.Token) error { checked = j; return nil })
	if err != nil {
		t.Fatalf("exchange after a refused check (the token stays unspent): %v", err)
	}
	if checked.Subject != "n-1" || checked.Name != "gpu" || checked.Kind != model.TokenJoin {
		t.Fatalf("check saw %+v", checked)
	}
	if tok.Kind != model.TokenAgent || tok.Subject != "n-1" || !tok.ExpiresAt.Equal(clk.Now().Add(24*time.Hour)) {
		t.Fatalf("agent token %+v", tok)
	}
	if got, err := id.Authenticate(agentSecret); err != nil || got.ID != tok.ID {
		t.Fatalf("the agent token does not authenticate: %v", err)
	}
	if _, _, err := id.ExchangeJoin(ctx, secret, time.Hour, func(*model.Token) error { return nil }); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("second exchange: %v, want ErrUnauthenticated", err)
	}
	if _, _, err := id.ExchangeJoin(ctx, agentSecret, time.Hour, func(*model.Token) error { return nil }); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("an agent token exchanged as a join token: %v", err)
	}
	// The spent join token and the agent token are one commit.
	last := com.Batches()[len(com.Batches())-1]
	if len(last.Tokens) != 2 || !last.Tokens[0].Revoked || last.Tokens[0].Kind != model.TokenJoin || last.Tokens[1].ID != tok.ID {
		t.Fatalf("exchange batch %+v", last.Tokens)
	}
}

func TestJoinTokenExpires(t *testing.T) {
	t.Parallel()
	id, _, clk, _ := newTest(t)
	ctx := context.Background()
	secret, err := id.MintJoinToken(ctx, "gpu", "n-2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, _, err := id.ExchangeJoin(ctx, secret, time.Hour, func(*model.Token) error { return nil }); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("expired join token: %v, want ErrUnauthenticated", err)
	}
}
