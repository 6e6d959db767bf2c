package endpoints_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api/endpoints"
)

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func post(t *testing.T, s *endpoints.Set, body string) (*http.Response, error) {
	return s.Do(func(base string) (*http.Request, error) {
		return http.NewRequest("POST", base+"/v1/jobs?x=1", bytes.NewReader([]byte(body)))
	})
}

// TestFindsAndRemembersLeader: a dead server is skipped, a follower's 307
// is followed with the body intact, and the leader is remembered.
func TestFindsAndRemembersLeader(t *testing.T) {
	var leaderHits, followerHits atomic.Int32
	lead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaderHits.Add(1)
		b, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.URL.RequestURI() != "/v1/jobs?x=1" || string(b) != "manifest" {
			t.Errorf("leader got %s %s %q", r.Method, r.URL.RequestURI(), b)
		}
		w.Write([]byte("created"))
	}))
	defer lead.Close()
	follow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		followerHits.Add(1)
		w.Header().Set(endpoints.RoleHeader, "follower")
		w.Header().Set("Location", lead.URL+r.URL.RequestURI())
		w.WriteHeader(http.StatusTemporaryRedirect)
	}))
	defer follow.Close()

	s := endpoints.New(deadURL(t)+", "+follow.URL+"/", nil)
	if !s.Several() {
		t.Fatal("two URLs, Several false")
	}
	resp, err := post(t, s, "manifest")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "created" || s.Current() != lead.URL {
		t.Fatalf("answer %q, current %s; want created from %s", got, s.Current(), lead.URL)
	}
	if resp, err = post(t, s, "manifest"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if leaderHits.Load() != 2 || followerHits.Load() != 1 {
		t.Errorf("leader hit %d times, follower %d; want 2 and 1 (the leader remembered)", leaderHits.Load(), followerHits.Load())
	}
}

// TestFollowerWithoutLeader: a follower that knows no leader (503) is
// passed over for the next server; when none answers, the error says why.
func TestFollowerWithoutLeader(t *testing.T) {
	follow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(endpoints.RoleHeader, "follower")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer follow.Close()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer ok.Close()

	s := endpoints.New(follow.URL+","+ok.URL, nil)
	resp, err := post(t, s, "x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.Current() != ok.URL {
		t.Errorf("current = %s, want %s", s.Current(), ok.URL)
	}

	alone := endpoints.New(follow.URL+","+deadURL(t), nil)
	if _, err := post(t, alone, "x"); err == nil {
		t.Error("no leader anywhere, and Do succeeded")
	}
}

// TestOtherAnswersPass: a 503 from a leader (no role header) and a 404 are
// answers, returned as they are.
func TestOtherAnswersPass(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer srv.Close()
	resp, err := post(t, endpoints.New(srv.URL, nil), "x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestSplit(t *testing.T) {
	got := endpoints.Split(" https://a:1/, ,https://b:2 ")
	if len(got) != 2 || got[0] != "https://a:1" || got[1] != "https://b:2" {
		t.Errorf("Split = %q", got)
	}
}

// TestLeadersOwnRedirects: a redirect from a server that is not a follower
// is the client's usual redirect, followed as before.
func TestLeadersOwnRedirects(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /a", http.RedirectHandler("/b", http.StatusSeeOther))
	mux.HandleFunc("GET /b", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("b")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	s := endpoints.New(srv.URL, nil)
	resp, err := s.Do(func(base string) (*http.Request, error) { return http.NewRequest("GET", base+"/a", nil) })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "b" {
		t.Errorf("got %q, want the redirect followed to b", b)
	}
}

// TestOneAttemptPerServer: a server that drops every connection is tried
// once per call, not retried.
func TestOneAttemptPerServer(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if _, err := post(t, endpoints.New(srv.URL, hc), "x"); err == nil {
		t.Fatal("a dropped connection succeeded")
	}
	if hits.Load() != 1 {
		t.Errorf("one server, %d attempts; want 1", hits.Load())
	}
}
