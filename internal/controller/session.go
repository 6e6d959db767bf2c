package controller

import (
	"encoding/hex"

	"github.com/gpufleet/gpufleet/internal/model"
)

// AuthenticateHash returns the valid token whose secret hashes to hash
// (auth.Hash): dashboard sessions keep the hash, never the secret.
func (c *Controller) AuthenticateHash(hash []byte) (*model.Token, error) {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	t, ok := c.tokens[hex.EncodeToString(hash)]
	c.mu.Unlock()
	if !ok || !t.Valid(now) {
		return nil, ErrUnauthenticated
	}
	return t, nil
}
