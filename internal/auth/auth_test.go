package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestNewTokenStoresOnlyHash(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, secret, err := New(model.TokenUser, "admin", "first", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "gfu_") || len(secret) < 40 {
		t.Fatalf("secret %q lacks prefix or entropy", secret)
	}
	if !Equal(tok.Hash, Hash(secret)) || Equal(tok.Hash, Hash(secret+"x")) {
		t.Fatal("hash does not identify the secret")
	}
	if strings.Contains(string(tok.Hash), secret) {
		t.Fatal("record contains the secret")
	}
	if !tok.Valid(now) || tok.Valid(now.Add(time.Hour)) {
		t.Fatal("expiry not honoured")
	}
	_, other, _ := New(model.TokenUser, "admin", "", now, time.Hour)
	if other == secret {
		t.Fatal("two tokens share a secret")
	}
}

func TestNewRefusesEndlessToken(t *testing.T) {
	if _, _, err := New(model.TokenJob, "j", "", time.Now(), 0); err == nil {
		t.Fatal("token without expiry accepted")
	}
}

func TestBearer(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  xyz ": "xyz", "Basic abc": "", "Bearer": "", "": ""} {
		got, ok := Bearer(in)
		if got != want || ok != (want != "") {
			t.Errorf("Bearer(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
