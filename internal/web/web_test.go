package web_test

import (
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/auth"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/web"
)

const userSecret = "gpf_user_secret"

func newUI(t *testing.T) *web.UI {
	t.Helper()
	want := hex.EncodeToString(auth.Hash(userSecret))
	agentHash := hex.EncodeToString(auth.Hash("gpf_agent"))
	return web.New(web.Config{ByHash: func(h []byte) (*model.Token, error) {
		switch hex.EncodeToString(h) {
		case want:
			return &model.Token{ID: "t1", Kind: model.TokenUser, Subject: "ada", ExpiresAt: time.Now().Add(time.Hour)}, nil
		case agentHash:
			return &model.Token{ID: "t2", Kind: model.TokenAgent, Subject: "n1", ExpiresAt: time.Now().Add(time.Hour)}, nil
		}
		return nil, errors.New("unknown")
	}})
}

func login(t *testing.T, ui *web.UI, secret string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", "http://fleet.test/ui/login", strings.NewReader(`{"token":"`+secret+`"}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Origin", "http://fleet.test")
	w := httptest.NewRecorder()
	ui.Handler().ServeHTTP(w, r)
	return w
}

func cookies(w *httptest.ResponseRecorder) map[string]*http.Cookie {
	out := map[string]*http.Cookie{}
	for _, c := range w.Result().Cookies() {
		out[c.Name] = c
	}
	return out
}

func TestLoginSetsStrictHttpOnlySession(t *testing.T) {
	t.Parallel()
	ui := newUI(t)
	w := login(t, ui, userSecret)
	if w.Code != http.StatusOK {
		t.Fatalf("login = %d %s", w.Code, w.Body)
	}
	c := cookies(w)
	s, x := c[web.SessionCookie], c[web.CSRFCookie]
	if s == nil || !s.HttpOnly || s.SameSite != http.SameSiteStrictMode || s.Value == "" {
		t.Fatalf("session cookie = %+v, want HttpOnly SameSite=Strict", s)
	}
	if strings.Contains(s.Value, userSecret) {
		t.Fatal("the session cookie carries the token")
	}
	if x == nil || x.HttpOnly || x.SameSite != http.SameSiteStrictMode {
		t.Fatalf("csrf cookie = %+v, want readable by the page, SameSite=Strict", x)
	}

	get := httptest.NewRequest("GET", "http://fleet.test/v1/jobs", nil)
	get.AddCookie(s)
	if tok, err := ui.Authenticate(get); err != nil || tok.Subject != "ada" {
		t.Fatalf("GET with session = %v, %v", tok, err)
	}
	for name, tc := range map[string]struct {
		csrf, origin string
		ok           bool
	}{
		"no csrf header":   {"", "http://fleet.test", false},
		"wrong csrf":       {"nope", "http://fleet.test", false},
		"cross-site":       {x.Value, "http://evil.test", false},
		"same site":        {x.Value, "http://fleet.test", true},
		"no origin header": {x.Value, "", true},
	} {
		post := httptest.NewRequest("POST", "http://fleet.test/v1/jobs", nil)
		post.AddCookie(s)
		if tc.csrf != "" {
			post.Header.Set(web.CSRFHeader, tc.csrf)
		}
		if tc.origin != "" {
			post.Header.Set("Origin", tc.origin)
		}
		_, err := ui.Authenticate(post)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", name, err, tc.ok)
		}
	}
}

func TestLoginRefusesBadAndNonUserTokens(t *testing.T) {
	t.Parallel()
	ui := newUI(t)
	for _, secret := range []string{"gpf_wrong", "gpf_agent"} {
		if w := login(t, ui, secret); w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Errorf("login with %s = %d, cookies %v", secret, w.Code, w.Result().Cookies())
		}
	}
	r := httptest.NewRequest("POST", "http://fleet.test/ui/login", strings.NewReader(`{"token":"`+userSecret+`"}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Origin", "http://evil.test")
	w := httptest.NewRecorder()
	ui.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("cross-site login = %d, want 403", w.Code)
	}
}

func TestAssetsAreEmbedded(t *testing.T) {
	t.Parallel()
	ui := newUI(t)
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		w := httptest.NewRecorder()
		ui.Handler().ServeHTTP(w, httptest.NewRequest("GET", "http://fleet.test"+p, nil))
		if w.Code != http.StatusOK || w.Body.Len() == 0 {
			t.Errorf("GET %s = %d", p, w.Code)
		}
		if !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: no CSP", p)
		}
		if strings.Contains(w.Body.String(), "http://") || strings.Contains(w.Body.String(), "https://") {
			if p != "/ui/app.js" { // app.js names the SVG namespace only
				t.Errorf("%s refers to another host", p)
			}
		}
	}
}
