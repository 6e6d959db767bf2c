package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/secrets"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

func keyring(t *testing.T, keys ...byte) *secrets.Keyring {
	t.Helper()
	var raw [][]byte
	for _, k := range keys {
		raw = append(raw, bytes.Repeat([]byte{k}, 32))
	}
	kr, err := secrets.NewKeyring(raw...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestPutOpenDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	com, red := &testutil.Committer{}, &secrets.Redactor{}
	v := New(Config{Committer: com, Keyring: keyring(t, 1), Redactor: red}, nil)
	if _, err := v.PutSecret(ctx, "ml", "bad name", []byte("x")); err == nil {
		t.Fatal("a bad name is accepted")
	}
	info, err := v.PutSecret(ctx, "ml", "HF_TOKEN", []byte("hf_first_value"))
	if err != nil || info.Version != 1 {
		t.Fatalf("PutSecret = %+v, %v", info, err)
	}
	if info, _ = v.PutSecret(ctx, "ml", "HF_TOKEN", []byte("hf_second_value")); info.Version != 2 {
		t.Fatalf("rewritten secret has version %d", info.Version)
	}
	env, err := v.Env("ml", []string{"HF_TOKEN"})
	if diff := cmp.Diff(map[string]string{"HF_TOKEN": "hf_second_value"}, env); diff != "" || err != nil {
		t.Fatalf("Env (-want +got):\n%s %v", diff, err)
	}
	if _, err := v.Env("nlp", []string{"HF_TOKEN"}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("another project's secret: %v", err)
	}
	if got := red.Scrub("hf_second_value hf_first_value"); got == "hf_second_value hf_first_value" {
		t.Fatalf("values are not scrubbed: %q", got)
	}
	for _, b := range com.Batches() {
		for _, s := range b.Access.Secrets {
			if strings.Contains(s.Sealed, "hf_") {
				t.Fatal("a value reached the store in clear")
			}
		}
	}
	if err := v.DeleteSecret(ctx, "ml", "HF_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if v.Has("ml", "HF_TOKEN") || len(v.Secrets("")) != 0 {
		t.Fatal("deleted secret still held")
	}
	if _, held, _ := v.Value("ml", "HF_TOKEN"); held {
		t.Fatal("deleted secret's value still served")
	}
	if err := v.DeleteSecret(ctx, "ml", "HF_TOKEN"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
}

// While Guard decides, the secret is reported absent, so what Guard guards
// cannot start to need it unseen; a refusal leaves it as it was.
func TestDeleteGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var v *Vault
	var seen []bool
	v = New(Config{Committer: &testutil.Committer{}, Keyring: keyring(t, 1), Guard: func(project, name string) error {
		seen = append(seen, v.Has(project, name))
		if name == "HOOK" {
			return fmt.Errorf("budget b names it: %w", model.ErrConflict)
		}
		return nil
	}}, nil)
	for _, n := range []string{"HOOK", "OTHER"} {
		if _, err := v.PutSecret(ctx, "ops", n, []byte("value-"+n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.DeleteSecret(ctx, "ops", "HOOK"); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("guarded delete: %v", err)
	}
	if err := v.DeleteSecret(ctx, "ops", "OTHER"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false, false}, seen); diff != "" {
		t.Errorf("Has during Guard (-want +got):\n%s", diff)
	}
	if !v.Has("ops", "HOOK") {
		t.Fatal("a refused delete removed the secret")
	}
	if val, held, opened := v.Value("ops", "HOOK"); !held || !opened || val != "value-HOOK" {
		t.Fatalf("Value = %q %v %v", val, held, opened)
	}
}

// Secrets sealed with a retired key stay held but do not open; resealing
// with the newest key makes them open once the old key is gone.
func TestResealAndRetiredKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := New(Config{Committer: &testutil.Committer{}, Keyring: keyring(t, 1)}, nil)
	if _, err := old.PutSecret(ctx, "ml", "K", []byte("value-k")); err != nil {
		t.Fatal(err)
	}
	stored := []model.Secret{{Project: "ml", Name: "K", Version: 1, Sealed: sealedOf(old, "ml", "K")}}

	retired := New(Config{Committer: &testutil.Committer{}, Keyring: keyring(t, 2)}, stored)
	if _, held, opened := retired.Value("ml", "K"); !held || opened {
		t.Fatalf("a secret of a retired key: held %v opened %v", held, opened)
	}
	if _, err := retired.Env("ml", []string{"K"}); err == nil {
		t.Fatal("a secret of a retired key opens for a job")
	}

	com := &testutil.Committer{}
	rotated := New(Config{Committer: com, Keyring: keyring(t, 1, 2)}, stored)
	if n, err := rotated.ResealSecrets(ctx); n != 1 || err != nil {
		t.Fatalf("ResealSecrets = %d, %v", n, err)
	}
	resealed := com.Batches()[0].Access.Secrets
	fresh := New(Config{Committer: &testutil.Committer{}, Keyring: keyring(t, 2)}, resealed)
	if env, err := fresh.Env("ml", []string{"K"}); err != nil || env["K"] != "value-k" {
		t.Fatalf("resealed secret with the new key alone: %v %v", env, err)
	}

	none := New(Config{Committer: &testutil.Committer{}}, nil)
	if _, err := none.PutSecret(ctx, "ml", "K", []byte("v")); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("no keyring: %v", err)
	}
}

func sealedOf(v *Vault, project, name string) string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for k, s := range v.sealed {
		if k.Project == project && k.Name == name {
			return s.Sealed
		}
	}
	return ""
}

// TestServiceKey: a project's replica key is made once, sealed, kept per
// project, found again by a vault loaded from what was committed, and
// cannot be written by a user; a deleted one is made anew.
func TestServiceKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	com, red := &testutil.Committer{}, &secrets.Redactor{}
	v := New(Config{Committer: com, Keyring: keyring(t, 1), Redactor: red}, nil)
	k1, err := v.ServiceKey(ctx, "ml")
	if err != nil || len(k1) != 64 {
		t.Fatalf("ServiceKey = %q, %v", k1, err)
	}
	if again, _ := v.ServiceKey(ctx, "ml"); again != k1 {
		t.Fatal("a second call made another key")
	}
	if other, _ := v.ServiceKey(ctx, "nlp"); other == k1 {
		t.Fatal("two projects share a replica key")
	}
	if env, err := v.Env("ml", []string{model.ServiceKeySecret}); err != nil || env[model.ServiceKeySecret] != k1 {
		t.Fatalf("a replica naming the key gets %v, %v", env, err)
	}
	if red.Scrub(k1) == k1 {
		t.Fatal("the key is not scrubbed from output")
	}
	if _, err := v.PutSecret(ctx, "ml", model.ServiceKeySecret, []byte("mine")); err == nil {
		t.Fatal("a user wrote the replica key")
	}
	var stored []model.Secret
	for _, b := range com.Batches() {
		for _, s := range b.Access.Secrets {
			if strings.Contains(s.Sealed, k1) {
				t.Fatal("the key reached the store in clear")
			}
			stored = append(stored, s)
		}
	}
	reloaded := New(Config{Committer: &testutil.Committer{}, Keyring: keyring(t, 1)}, stored)
	if k, _ := reloaded.ServiceKey(ctx, "ml"); k != k1 {
		t.Fatal("a reloaded vault (a restart, a new leader) made another key")
	}
	if err := v.DeleteSecret(ctx, "ml", model.ServiceKeySecret); err != nil {
		t.Fatal(err)
	}
	if k, _ := v.ServiceKey(ctx, "ml"); k == k1 || len(k) != 64 {
		t.Fatalf("after a deletion: %q", k)
	}
	if _, err := New(Config{Committer: com}, nil).ServiceKey(ctx, "ml"); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("without a keyring: %v", err)
	}
}
