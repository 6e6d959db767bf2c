// Package endpoints finds the leader among several server URLs, for the API
// client and the agent protocol: each request goes to the server last known
// to lead; a server that does not answer is skipped for the next in the
// list, and a follower's redirect (307 with the leader's URL) is followed
// and remembered.
package endpoints

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// LeaderHeader carries the leader's URL on a follower's answers (a 307's
// Location says the same, with the request's path).
const LeaderHeader = "X-Gpufleet-Leader"

// RoleHeader says "leader" or "follower" on /readyz and on every answer a
// follower gives.
const RoleHeader = "X-Gpufleet-Role"

// Split parses a comma-separated list of server URLs, trimming spaces and
// trailing slashes and dropping empty items.
func Split(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Set is the servers one client calls. It is safe for concurrent use.
type Set struct {
	hc *http.Client

	mu   sync.Mutex
	urls []string
	cur  string // the server last known to lead (or to answer)
}

// New returns a Set of the comma-separated URLs in servers, sending with hc
// (whose redirects it handles itself: hc is copied, not changed).
func New(servers string, hc *http.Client) *Set {
	urls := Split(servers)
	if len(urls) == 0 {
		urls = []string{strings.TrimRight(servers, "/")}
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	own := *hc
	orig := hc.CheckRedirect
	own.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Response != nil && req.Response.Header.Get(RoleHeader) == "follower" {
			return http.ErrUseLastResponse // Do follows it, and remembers the leader
		}
		if orig != nil {
			return orig(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &Set{hc: &own, urls: urls, cur: urls[0]}
}

// Current is the server requests go to first.
func (s *Set) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Several reports whether the Set has more than one server to try.
func (s *Set) Several() bool { return len(s.urls) > 1 }

func (s *Set) set(u string) {
	s.mu.Lock()
	s.cur = u
	s.mu.Unlock()
}

// next moves past failed, unless another request already did.
func (s *Set) next(failed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != failed {
		return
	}
	for i, u := range s.urls {
		if u == failed {
			s.cur = s.urls[(i+1)%len(s.urls)]
			return
		}
	}
	s.cur = s.urls[0] // a leader learnt from a redirect, not in the list
}

// Do sends the request build makes for a server base URL. A transport
// error moves on to the next server; a follower's answer (RoleHeader
// "follower": a 307 to the leader, or a 503 naming it or none) is followed
// to the leader, which is remembered, or to the next server. It gives up,
// returning the last error, after as many failures as there are servers
// (so a lone unreachable server costs one attempt, as without replicas) or
// a few redirects. build is called once per try, so a request body must be
// re-readable (req.GetBody set, as for bytes readers) to be tried twice.
func (s *Set) Do(build func(base string) (*http.Request, error)) (*http.Response, error) {
	var lastErr error
	failed := 0 // servers that did not answer, or followers that know no leader
	for try := 0; try < len(s.urls)+3 && failed < len(s.urls); try++ {
		base := s.Current()
		req, err := build(base)
		if err != nil {
			return nil, err
		}
		if try > 0 && req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return nil, lastErr // a streamed body can be sent once
		}
		resp, err := s.hc.Do(req)
		if err != nil {
			// Whatever stopped it (refused, reset, the caller's deadline
			// with a frozen server), the next call tries another server.
			s.next(base)
			if req.Context().Err() != nil {
				return nil, err
			}
			lastErr = err
			failed++
			continue
		}
		redirect := resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect
		if resp.Header.Get(RoleHeader) != "follower" || !redirect && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil // an answer (a follower's own /healthz or /metrics too)
		}
		leader := baseOf(resp.Header.Get(LeaderHeader))
		if redirect {
			leader = baseOf(resp.Header.Get("Location"))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if leader == "" || leader == base {
			// A follower that knows no leader yet (an election is on).
			lastErr = fmt.Errorf("%s is a follower and knows no leader yet (an election may be in progress): %s", base, resp.Status)
			s.next(base)
			failed++
			continue
		}
		s.set(leader)
	}
	if lastErr == nil {
		lastErr = errors.New("too many redirects between gpufleet servers")
	}
	return nil, lastErr
}

// baseOf is the scheme and host of an absolute http(s) URL, or "".
func baseOf(loc string) string {
	u, err := url.Parse(loc)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
