// Package auth makes and checks API tokens. A token's secret is 32 random
// bytes shown to its holder once; gpufleet keeps only its SHA-256, so a
// stolen database yields no usable credential. The secret carries a prefix
// naming its kind so a leaked token is recognisable in logs and scanners.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// prefixes per token kind.
var prefixes = map[model.TokenKind]string{
	model.TokenUser:  "gfu_",
	model.TokenAgent: "gfa_",
	model.TokenJob:   "gfj_",
	model.TokenJoin:  "gfn_",
	model.TokenProxy: "gfp_",
}

// New mints a token of kind for subject, valid for ttl from now. It returns
// the record to store (hash only) and the secret to hand out.
func New(kind model.TokenKind, subject, name string, now time.Time, ttl time.Duration) (*model.Token, string, error) {
	prefix, ok := prefixes[kind]
	if !ok {
		return nil, "", fmt.Errorf("unknown token kind %q", kind)
	}
	if ttl <= 0 {
		return nil, "", fmt.Errorf("token ttl must be positive: every token expires")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", fmt.Errorf("reading random bytes: %w", err)
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, "", fmt.Errorf("reading random bytes: %w", err)
	}
	secret := prefix + base64.RawURLEncoding.EncodeToString(raw[:])
	tok := &model.Token{
		ID:        "tok-" + hex.EncodeToString(id[:]),
		Kind:      kind,
		Subject:   subject,
		Name:      name,
		Hash:      Hash(secret),
		CreatedAt: now,
		ExpiresAt: now.Add(ttl),
	}
	return tok, secret, nil
}

// Hash returns the stored form of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Equal compares two hashes in constant time.
func Equal(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

// Bearer extracts the token from an Authorization header value.
func Bearer(header string) (string, bool) {
	const p = "Bearer "
	if len(header) <= len(p) || !strings.EqualFold(header[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(header[len(p):]), true
}
