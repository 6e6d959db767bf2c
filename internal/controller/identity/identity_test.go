package identity

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

func newTest(t *testing.T) (*Identity, *testutil.Committer, *clock.Fake, *secrets.Redactor) {
	t.Helper()
	com, clk, red := &testutil.Committer{}, clock.NewFake(t0), &secrets.Redactor{}
	return New(Config{Committer: com, Clock: clk, Redactor: red}, nil, nil), com, clk, red
}

func TestTokenLifecycle(t *testing.T) {
	t.Parallel()
	id, com, clk, _ := newTest(t)
	ctx := context.Background()
	tok, secret, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenUser, Subject: "ada", Name: "laptop", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := id.Authenticate(secret); err != nil || got.ID != tok.ID {
		t.Fatalf("Authenticate = %v, %v; want %s", got, err, tok.ID)
	}
	if _, err := id.Authenticate("not-a-secret"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown secret: %v", err)
	}
	rot, rotSecret, err := id.RotateToken(ctx, tok.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := id.Authenticate(secret); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("rotated-away token authenticates: %v", err)
	}
	if got, err := id.AuthenticateHash(rot.Hash); err != nil || got.ID != rot.ID || got.Name != "laptop" {
		t.Fatalf("AuthenticateHash of the new token = %+v, %v", got, err)
	}
	if err := id.RevokeToken(ctx, "tok-nosuch"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoking an unknown token: %v", err)
	}
	clk.Advance(time.Hour)
	if _, err := id.Authenticate(rotSecret); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("expired token authenticates: %v", err)
	}
	if n := len(id.Tokens()); n != 0 {
		t.Fatalf("%d tokens listed after expiry", n)
	}
	// Each change was one batch, in the order made: create, rotate (old
	// revoked with the new one).
	var got [][]string
	for _, b := range com.Batches() {
		var ids []string
		for _, t := range b.Tokens {
			ids = append(ids, t.ID)
		}
		got = append(got, ids)
	}
	if diff := cmp.Diff([][]string{{tok.ID}, {tok.ID, rot.ID}}, got); diff != "" {
		t.Errorf("committed tokens (-want +got):\n%s", diff)
	}
	if _, _, err := id.CreateToken(ctx, model.TokenRequest{Kind: model.TokenJob, Subject: "j-1", TTL: time.Hour}); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("a job token on request: %v", err)
	}
}

// A token's secret is handed out only once the token is durable.
func TestCreateTokenWaitsUntilDurable(t *testing.T) {
	t.Parallel()
	id, com, _, _ := newTest(t)
	com.Hold()
	done := make(chan error, 1)
	go func() {
		_, _, err := id.CreateToken(context.Background(), model.TokenRequest{Kind: model.TokenUser, Subject: "ada", TTL: time.Hour})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("CreateToken answered before its batch was durable (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	com.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestJobTokens(t *testing.T) {
	t.Parallel()
	id, _, _, red := newTest(t)
	var b store.Batch
	s1, err := id.MintJobToken("j-1", "j-1-a1", time.Hour, &b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := id.MintJobToken("j-1", "j-1-a1", time.Hour, &b)
	s2, _ := id.MintJobToken("j-1", "j-1-a2", time.Hour, &b)
	if again != s1 || s2 == s1 || len(b.Tokens) != 2 {
		t.Fatalf("minted %d tokens (want 2), same attempt same secret %v, attempts differ %v", len(b.Tokens), again == s1, s2 != s1)
	}
	if tok, err := id.Authenticate(s1); err != nil || tok.Kind != model.TokenJob || tok.Subject != "j-1" {
		t.Fatalf("job token = %+v, %v", tok, err)
	}
	if got := red.Scrub("token " + s1); got == "token "+s1 {
		t.Fatal("a live job token is not scrubbed")
	}
	id.EndAttempt("j-1-a1")
	if got := red.Scrub("token " + s1); got != "token "+s1 {
		t.Fatalf("an ended attempt's token is still scrubbed: %q", got)
	}
	var end store.Batch
	id.RevokeJob("j-1", &end)
	if len(end.Tokens) != 2 || !end.Tokens[0].Revoked || !end.Tokens[1].Revoked {
		t.Fatalf("RevokeJob wrote %+v", end.Tokens)
	}
	for _, s := range []string{s1, s2} {
		if _, err := id.Authenticate(s); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("a finished job's token authenticates: %v", err)
		}
	}
	var none store.Batch
	if id.RevokeJob("j-1", &none); len(none.Tokens) != 0 {
		t.Fatalf("revoked again: %+v", none.Tokens)
	}
}

func TestGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := New(Config{Committer: &testutil.Committer{}, Clock: clock.NewFake(t0)}, nil, []model.Grant{{User: "bob", Project: model.AllProjects, Role: model.RoleAdmin}})
	ada := &model.Token{Kind: model.TokenUser, Subject: "ada"}
	if _, err := id.Grant(ctx, model.Grant{User: "ada", Project: "ml", Role: model.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if _, err := id.Grant(ctx, model.Grant{User: "ada", Project: "ml", Role: "owner-ish"}); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("an unknown role: %v", err)
	}
	roles, global := id.Roles(ada)
	if diff := cmp.Diff(map[string]model.Role{"ml": model.RoleMember}, roles); diff != "" || global {
		t.Errorf("roles (-want +got):\n%s (global %v)", diff, global)
	}
	if r := id.RoleIn(&model.Token{Kind: model.TokenUser, Subject: "bob"}, "anything"); r != model.RoleAdmin {
		t.Errorf("a global admin grant gives %q", r)
	}
	if r := id.RoleIn(&model.Token{Kind: model.TokenAgent, Subject: "ada"}, "ml"); r != "" {
		t.Errorf("an agent token holds %q", r)
	}
	if err := id.RevokeGrant(ctx, "ada", "ml"); err != nil {
		t.Fatal(err)
	}
	if err := id.RevokeGrant(ctx, "ada", "ml"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("revoking twice: %v", err)
	}
	if n := len(id.Grants()); n != 1 {
		t.Fatalf("%d grants, want bob's", n)
	}
}
