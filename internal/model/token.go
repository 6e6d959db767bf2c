package model

import "time"

// TokenKind says who holds a token.
type TokenKind string

// Token kinds (DESIGN.md §6).
const (
	TokenUser  TokenKind = "user"
	TokenAgent TokenKind = "agent"
	TokenJob   TokenKind = "job"
	// TokenJoin is a launched instance's one-time token: its agent
	// exchanges it once, on first contact, for its node's agent token.
	// It authorizes nothing else.
	TokenJoin TokenKind = "join"
	// TokenProxy is a separate service proxy's (gpufleet proxy): it
	// reads the services' endpoint list, reports their load and asks
	// whether a caller may use a service, and nothing else.
	TokenProxy TokenKind = "proxy"
)

// Token is an API credential as the store keeps it: only the SHA-256 of the
// secret is kept, never the secret.
type Token struct {
	ID   string    `json:"id"`
	Kind TokenKind `json:"kind"`
	// Subject is the user name, node id or job id the token speaks for.
	Subject   string    `json:"subject"`
	Name      string    `json:"name,omitempty"`
	Admin     bool      `json:"admin,omitempty"`
	Hash      []byte    `json:"-"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Revoked   bool      `json:"revoked,omitempty"`
}

// Valid reports whether the token may be used at now.
func (t *Token) Valid(now time.Time) bool { return !t.Revoked && now.Before(t.ExpiresAt) }
