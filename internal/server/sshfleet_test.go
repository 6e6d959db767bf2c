package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/controller/vault"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// An ssh pool's identityRef opens from the vault; a missing one is named
// with the command that writes it.
func TestSSHKeysOpenFromTheVault(t *testing.T) {
	kr, err := secrets.NewKeyring(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	v := vault.New(vault.Config{Committer: &testutil.Committer{}, Keyring: kr, Redactor: &secrets.Redactor{}}, nil)
	ctx := context.Background()
	const key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"
	if _, err := v.PutSecret(ctx, "ops", "LAB_SSH_KEY", []byte(key)); err != nil {
		t.Fatal(err)
	}
	keys := vaultKeys{v}
	got, err := keys.OpenSecret(ctx, "ops/LAB_SSH_KEY")
	if err != nil || string(got) != key {
		t.Fatalf("OpenSecret = %q, %v", got, err)
	}
	_, err = keys.OpenSecret(ctx, "ops/NOPE")
	if !errors.Is(err, model.ErrNotFound) || !strings.Contains(err.Error(), "gpufleet secrets set ops NOPE") {
		t.Errorf("OpenSecret(missing) = %v", err)
	}
	if _, err := keys.OpenSecret(ctx, "no-slash"); err == nil {
		t.Error("a malformed reference opened")
	}
}
