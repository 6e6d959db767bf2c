// Package web serves the dashboard: static assets embedded in the binary
// (no external network), a login that trades a user token for a session
// cookie, and the session check the API uses for requests that carry the
// cookie instead of a bearer token.
//
// Sessions: the cookie holds a random session id; the server keeps, per
// hash of that id, the hash of the user's token (never the token) and a
// CSRF secret. The session cookie is HttpOnly and SameSite=Strict (Secure
// under TLS). A state-changing request authenticated by the cookie must
// carry the CSRF secret in X-CSRF-Token (double submit: the page reads it
// from the gpufleet_csrf cookie) and, when it has an Origin header, come
// from this host. Each request re-checks the token, so revoking it ends
// its sessions.
package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

//go:embed assets
var assets embed.FS

// Cookie and header names.
const (
	SessionCookie = "gpufleet_session"
	CSRFCookie    = "gpufleet_csrf"
	CSRFHeader    = "X-CSRF-Token"
)

// Errors of Authenticate.
var (
	ErrNoSession = errors.New("no dashboard session")
	ErrCSRF      = errors.New("cross-site request refused: missing or wrong CSRF token or origin")
)

// Config wires the dashboard.
type Config struct {
	// ByHash returns the valid token whose secret has this hash
	// (identity.Identity.AuthenticateHash). Required.
	ByHash func(hash []byte) (*model.Token, error)
	// SessionTTL bounds a session (12h).
	SessionTTL time.Duration
	Clock      clock.Clock
	Log        *slog.Logger
}

// UI is the dashboard and its sessions. Safe for concurrent use.
type UI struct {
	cfg    Config
	static http.Handler

	mu       sync.Mutex
	sessions map[string]*session // by hex sha256 of the session id
}

type session struct {
	tokenHash []byte
	csrf      string
	expires   time.Time
}

// New returns the dashboard.
func New(cfg Config) *UI {
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	return &UI{cfg: cfg, static: http.StripPrefix("/ui/", http.FileServerFS(sub)), sessions: map[string]*session{}}
}

// Handler serves /ui/: the assets, POST /ui/login and POST /ui/logout.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ui/login", u.login)
	mux.HandleFunc("POST /ui/logout", u.logout)
	mux.HandleFunc("GET /ui/session", u.sessionInfo)
	mux.Handle("GET /ui/jobs/{id}", u.secureHeaders(http.HandlerFunc(u.page)))
	mux.Handle("GET /ui/", u.secureHeaders(u.static))
	return mux
}

// page serves the dashboard's page for a path the page routes itself
// (/ui/jobs/ID: a job's page).
func (u *UI) page(w http.ResponseWriter, r *http.Request) {
	data, err := assets.ReadFile("assets/index.html")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(data)
}

// secureHeaders keeps the page from loading anything off this server and
// from being framed.
func (u *UI) secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

func hashHex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func random() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // no entropy: nothing can proceed
	}
	return hex.EncodeToString(b[:])
}

// sameOrigin reports whether a request's Origin (or, without one, its
// Referer) names this host; a request with neither passes (non-browser
// clients), as the SameSite=Strict cookie already keeps cross-site
// browsers out.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" {
		return true
	}
	if o == "null" {
		return false
	}
	p, err := url.Parse(o)
	return err == nil && p.Host == r.Host
}

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, ErrCSRF.Error(), http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	var secret string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad login body", http.StatusBadRequest)
			return
		}
		secret = body.Token
	} else {
		secret = r.PostFormValue("token")
	}
	secret = strings.TrimSpace(secret)
	h := auth.Hash(secret)
	tok, err := u.cfg.ByHash(h)
	if err != nil || tok.Kind != model.TokenUser {
		// One answer for unknown, expired and non-user tokens.
		http.Error(w, "that is not a valid user token", http.StatusUnauthorized)
		return
	}
	id, csrf := random(), random()
	now := u.cfg.Clock.Now()
	exp := now.Add(u.cfg.SessionTTL)
	if tok.ExpiresAt.Before(exp) {
		exp = tok.ExpiresAt
	}
	u.mu.Lock()
	for k, s := range u.sessions { // sweep expired sessions as new ones come
		if !now.Before(s.expires) {
			delete(u.sessions, k)
		}
	}
	u.sessions[hashHex(id)] = &session{tokenHash: h, csrf: csrf, expires: exp}
	u.mu.Unlock()
	secure := r.TLS != nil
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure, Expires: exp})
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: csrf, Path: "/", SameSite: http.SameSiteStrictMode, Secure: secure, Expires: exp})
	u.cfg.Log.Info("dashboard login", "token_id", tok.ID, "subject", tok.Subject)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"subject": tok.Subject})
		return
	}
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	if _, err := u.Authenticate(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		u.mu.Lock()
		delete(u.sessions, hashHex(c.Value))
		u.mu.Unlock()
	}
	for _, name := range []string{SessionCookie, CSRFCookie} {
		http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: name == SessionCookie, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionInfo tells the page whether it is logged in, and as whom.
func (u *UI) sessionInfo(w http.ResponseWriter, r *http.Request) {
	tok, err := u.Authenticate(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"loggedIn":false}`))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"loggedIn": true, "subject": tok.Subject, "admin": tok.Admin})
}

// Authenticate returns the token of the request's session. Requests with
// methods other than GET, HEAD and OPTIONS must pass the CSRF checks. It
// returns ErrNoSession when the request has no valid session cookie.
func (u *UI) Authenticate(r *http.Request) (*model.Token, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil, ErrNoSession
	}
	now := u.cfg.Clock.Now()
	u.mu.Lock()
	s, ok := u.sessions[hashHex(c.Value)]
	if ok && !now.Before(s.expires) {
		delete(u.sessions, hashHex(c.Value))
		ok = false
	}
	var th []byte
	var csrf string
	if ok {
		th, csrf = s.tokenHash, s.csrf
	}
	u.mu.Unlock()
	if !ok {
		return nil, ErrNoSession
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		got := r.Header.Get(CSRFHeader)
		if !sameOrigin(r) || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(csrf)) != 1 {
			return nil, ErrCSRF
		}
	}
	tok, err := u.cfg.ByHash(th)
	if err != nil {
		return nil, ErrNoSession
	}
	return tok, nil
}
