package server

import (
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
