package api

import (
	"errors"
	"net/http"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Sessions authenticates a request by its dashboard session cookie,
// enforcing CSRF protection on state-changing methods (web.UI).
type Sessions interface {
	// Authenticate returns the session's token; an error when the
	// request has no valid session or fails the CSRF checks.
	Authenticate(r *http.Request) (*model.Token, error)
}

var errNoCredentials = errors.New("no bearer token or session")

// authenticate finds the request's token: the bearer token when there is
// an Authorization header, else the dashboard session.
func (s *Server) authenticate(r *http.Request) (*model.Token, error) {
	if secret, ok := auth.Bearer(r.Header.Get("Authorization")); ok {
		return s.cfg.Identity.Authenticate(secret)
	}
	if r.Header.Get("Authorization") == "" && s.cfg.Sessions != nil {
		return s.cfg.Sessions.Authenticate(r)
	}
	return nil, errNoCredentials
}
