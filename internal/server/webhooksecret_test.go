package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A server without --webhook-secret signs with a key of its own, made once
// (0600) and kept across restarts; a damaged one is refused.
func TestWebhookSecretIsMadeOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	first, path, err := loadWebhookSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 || path != filepath.Join(dir, WebhookSecretFile) {
		t.Fatalf("key %q at %s", first, path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	again, _, err := loadWebhookSecret(dir)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("second load = %q, %v; want the same key", again, err)
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadWebhookSecret(dir); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("a too-short key loaded: %v", err)
	}
}
