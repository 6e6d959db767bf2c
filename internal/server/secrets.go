package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpufleet/gpufleet/internal/secrets"
)

// loadKeyring returns the sealing keys: GPUFLEET_SECRET_KEYS (hex keys,
// comma-separated, oldest first) if set, else the data dir's key file,
// created with one fresh key (mode 0600) when missing.
func loadKeyring(dataDir string) (*secrets.Keyring, string, error) {
	if v := os.Getenv("GPUFLEET_SECRET_KEYS"); v != "" {
		kr, err := secrets.ParseKeys(v)
		if err != nil {
			return nil, "", fmt.Errorf("GPUFLEET_SECRET_KEYS: %w", err)
		}
		return kr, "env GPUFLEET_SECRET_KEYS", nil
	}
	path := filepath.Join(dataDir, SecretKeyFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := secrets.CreateKeyFile(path); err != nil {
			return nil, "", err
		}
	}
	kr, err := secrets.LoadKeyFile(path)
	return kr, path, err
}

// WebhookSecretFile holds the webhook signing key a server made for itself
// when it was given no --webhook-secret.
const WebhookSecretFile = "webhook.secret"

// loadWebhookSecret returns the data dir's own webhook signing key, making
// it (32 random bytes, hex, mode 0600) on first use, so budget and
// notification webhooks are signed on a plain `up` too; receivers verify
// with the file's contents. Replicas of one fleet must share one key: give
// them --webhook-secret.
func loadWebhookSecret(dataDir string) ([]byte, string, error) {
	path := filepath.Join(dataDir, WebhookSecretFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, "", fmt.Errorf("making a webhook signing key: %w", err)
		}
		data = []byte(hex.EncodeToString(raw))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, "", fmt.Errorf("writing the webhook signing key: %w", err)
		}
		_, werr := f.Write(data)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return nil, "", fmt.Errorf("writing the webhook signing key: %w", err)
		}
		return data, path, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the webhook signing key: %w", err)
	}
	key := bytes.TrimSpace(data)
	if len(key) < minWebhookSecret {
		return nil, "", fmt.Errorf("%s holds %d bytes, fewer than %d: delete it to make a new one", path, len(key), minWebhookSecret)
	}
	return key, path, nil
}
