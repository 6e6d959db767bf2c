package services

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Errors the proxy answers with 503.
var (
	errQueueFull = errors.New("too many requests are waiting for a replica")
	errNoReplica = errors.New("no replica became ready in time")
	errNoService = errors.New("no such service")
)

// maxReplayBody is the largest request body the proxy keeps to send again
// to another replica when the first one fails.
const maxReplayBody = 1 << 20

// proxyKey carries a request's service name and held replica through the
// ReverseProxy to the transport.
type proxyKey struct{}

type proxyReq struct {
	service string
	// key is the replica key sent to the replica ("" for none).
	key string
}

// Proxy serves one request to service name; rest is the path after
// /services/NAME. Replicas are chosen by least outstanding requests among
// the ready ones. A request with no ready replica waits for one (up to the
// service's scaleFromZeroTimeout, at most queueLimit of them) and wakes the
// autoscaler. A replica that fails before answering is marked unready and
// the request goes to another: any request whose connection was refused,
// and idempotent ones (GET, HEAD, OPTIONS, or with an Idempotency-Key) on
// any transport error. Responses stream unbuffered (Server-Sent Events).
// authorize answers whether r may call a service of project whose auth
// mode is token: 0 when it may, else the status to refuse with (401
// without a valid token, 404 without a role there: to a caller who may
// not see the project, its services do not exist, as in the API). An
// apiKey service takes "Authorization: Bearer KEY" with the value of one
// of its auth.secrets (401 otherwise). Whatever the mode, the caller's
// Authorization header is not forwarded: with Keys set, the replica gets
// the project's replica key there instead.
func (m *Manager) Proxy(w http.ResponseWriter, r *http.Request, name, rest string, authorize func(r *http.Request, project string) int) {
	start := m.cfg.Clock.Now()
	m.mu.Lock()
	e, ok := m.svcs[name]
	var auth model.ServiceAuth
	var project string
	if ok {
		auth, project = e.svc.Spec.Auth, e.svc.Project
	}
	m.mu.Unlock()
	if !ok {
		http.Error(w, "no such service: "+name, http.StatusNotFound)
		return
	}
	code := 0
	switch auth.Mode {
	case model.AuthPublic:
	case model.AuthAPIKey:
		if !m.keyOK(r, project, auth.Secrets) {
			code = http.StatusUnauthorized
		}
	default:
		code = authorize(r, project)
	}
	switch code {
	case 0:
	case http.StatusNotFound, http.StatusForbidden:
		http.Error(w, "no such service: "+name, http.StatusNotFound)
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpufleet"`)
		what := "a gpufleet token with a role in the service's project"
		if auth.Mode == model.AuthAPIKey {
			what = "one of the service's API keys"
		}
		http.Error(w, fmt.Sprintf("service %s needs %s as Authorization: Bearer …", name, what), code)
	}
	if code != 0 {
		if code == http.StatusForbidden {
			code = http.StatusNotFound
		}
		m.cfg.Metrics.observe(name, code, m.cfg.Clock.Now().Sub(start))
		return
	}
	r.Header.Del("Authorization") // the caller's token or key stays here
	m.mu.Lock()
	if e, ok := m.svcs[name]; ok {
		e.requests++
		e.rate.add(start)
	}
	m.mu.Unlock()
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= maxReplayBody {
		data, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(data) <= maxReplayBody {
			r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(data))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		} else { // too large to keep: sent once, as it streams
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
		}
	}
	pr := &proxyReq{service: name, key: m.replicaKey(project)}
	r = r.WithContext(context.WithValue(r.Context(), proxyKey{}, pr))
	rec := &recorder{ResponseWriter: w, now: m.cfg.Clock.Now}
	m.reverseProxy(rest).ServeHTTP(rec, r)
	code = rec.code
	if code == 0 {
		code = 499 // the client left before an answer
	} else {
		m.mu.Lock()
		if e, ok := m.svcs[name]; ok {
			e.latency.add(rec.first, rec.first.Sub(start))
		}
		m.mu.Unlock()
	}
	m.cfg.Metrics.observe(name, code, m.cfg.Clock.Now().Sub(start))
}

func (m *Manager) reverseProxy(rest string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "replica" // the transport picks the host
			pr.Out.URL.Path, pr.Out.URL.RawPath = rest, ""
			pr.Out.Host = ""
			pr.SetXForwarded()
			stripCookies(pr.Out.Header, m.cfg.StripCookies)
			if key := pr.In.Context().Value(proxyKey{}).(*proxyReq).key; key != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+key)
			}
		},
		Transport:     (*replicaTransport)(m),
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if cs := resp.Header.Values("Set-Cookie"); len(cs) > 0 {
				resp.Header.Del("Set-Cookie")
				for _, c := range cs {
					if !m.stripped(strings.TrimSpace(strings.SplitN(c, "=", 2)[0])) {
						resp.Header.Add("Set-Cookie", c)
					}
				}
			}
			pr := resp.Request.Context().Value(proxyKey{}).(*proxyReq)
			resp.Body = &usageBody{ReadCloser: resp.Body, done: func(n int64) { m.countTokens(pr.service, n) }}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			switch {
			case errors.Is(err, errQueueFull), errors.Is(err, errNoReplica):
				w.Header().Set("Retry-After", "5")
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			case errors.Is(err, errNoService):
				http.Error(w, err.Error(), http.StatusNotFound)
			case r.Context().Err() != nil:
				// The client is gone; nobody reads an answer.
			default:
				http.Error(w, "the replica failed: "+err.Error(), http.StatusBadGateway)
			}
		},
	}
}

// keyOK reports whether r carries, as a bearer token, the value of one of
// project's secrets names. Values are compared in constant time.
func (m *Manager) keyOK(r *http.Request, project string, names []string) bool {
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok || m.cfg.Keys == nil {
		return false
	}
	match := 0
	for _, name := range names {
		if want, _, opened := m.cfg.Keys.Value(project, name); opened && want != "" {
			match |= subtle.ConstantTimeCompare([]byte(got), []byte(want))
		}
	}
	return match == 1
}

// bearer returns the token of an "Authorization: Bearer TOKEN" value.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
}

// replicaKey is project's replica key, "" without Keys or one.
func (m *Manager) replicaKey(project string) string {
	if m.cfg.Keys == nil {
		return ""
	}
	key, _, _ := m.cfg.Keys.Value(project, model.ServiceKeySecret)
	return key
}

func (m *Manager) stripped(name string) bool {
	for _, s := range m.cfg.StripCookies {
		if s == name {
			return true
		}
	}
	return false
}

// stripCookies removes the named cookies from a request's Cookie headers.
func stripCookies(h http.Header, names []string) {
	if len(names) == 0 || h.Get("Cookie") == "" {
		return
	}
	var keep []string
	for _, line := range h.Values("Cookie") {
		for _, c := range strings.Split(line, ";") {
			n := strings.TrimSpace(strings.SplitN(c, "=", 2)[0])
			drop := false
			for _, s := range names {
				drop = drop || n == s
			}
			if !drop && strings.TrimSpace(c) != "" {
				keep = append(keep, strings.TrimSpace(c))
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// replicaTransport sends each request to a replica the Manager picks, and
// to another when that one fails in a way that is safe to retry.
type replicaTransport Manager

// maxTries bounds the replicas one request is sent to.
const maxTries = 3

func (t *replicaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m := (*Manager)(t)
	pr := req.Context().Value(proxyKey{}).(*proxyReq)
	tried := map[string]bool{}
	var lastErr error
	for try := 0; try < maxTries; try++ {
		b, err := m.acquire(req.Context(), pr.service, tried)
		if err != nil {
			if lastErr != nil && !errors.Is(err, context.Canceled) {
				return nil, fmt.Errorf("%w (after: %v)", err, lastErr)
			}
			return nil, err
		}
		out := req.Clone(req.Context())
		out.URL.Host = b.addr
		if try > 0 && req.GetBody != nil {
			if out.Body, err = req.GetBody(); err != nil {
				m.release(pr.service, b, false)
				return nil, err
			}
		}
		resp, err := replicaClient.RoundTrip(out)
		if err == nil && resp.StatusCode == http.StatusBadGateway && resp.Header.Get(model.ReplicaUnreachableHeader) != "" {
			// The replica's gate reached nothing: as a refused dial.
			resp.Body.Close()
			resp, err = nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("the replica is not listening behind its gate")}
		}
		if err == nil {
			var once sync.Once
			resp.Body = &releaseBody{ReadCloser: resp.Body, release: func() { once.Do(func() { m.release(pr.service, b, false) }) }}
			return resp, nil
		}
		m.release(pr.service, b, true)
		lastErr = err
		tried[b.job] = true
		if !retryable(req, err) {
			return nil, err
		}
	}
	return nil, lastErr
}

// replicaClient is the transport to replicas: plain HTTP on the node's
// network, keep-alive, no proxy from the environment.
var replicaClient = &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
}

// retryable says whether req may go to another replica after err: when
// the connection was never made (nothing reached the replica) and the
// body can be sent again, or when the request is idempotent.
func retryable(req *http.Request, err error) bool {
	if req.Context().Err() != nil {
		return false
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// acquire picks the ready replica of service with the fewest requests
// outstanding (not one in tried) and counts the request on it, waiting for
// one while there is none.
func (m *Manager) acquire(ctx context.Context, service string, tried map[string]bool) (*backend, error) {
	var timer <-chan time.Time
	for {
		m.mu.Lock()
		e, ok := m.svcs[service]
		if !ok {
			m.mu.Unlock()
			return nil, errNoService
		}
		var best *backend
		for _, b := range e.replicas {
			if !b.ready || !b.draining.IsZero() || b.moving || tried[b.job] {
				continue
			}
			if best == nil || b.inFlight < best.inFlight || (b.inFlight == best.inFlight && b.slot < best.slot) {
				best = b
			}
		}
		if best != nil {
			best.inFlight++
			m.mu.Unlock()
			return best, nil
		}
		if e.waiting >= e.svc.Spec.Autoscaling.QueueLimit {
			m.mu.Unlock()
			return nil, errQueueFull
		}
		if timer == nil {
			timer = m.cfg.Clock.After(e.svc.Spec.Autoscaling.ScaleFromZeroTimeout.D())
		}
		e.waiting++
		changed := e.changed
		m.mu.Unlock()
		m.poke()
		var err error
		select {
		case <-changed:
		case <-timer:
			err = fmt.Errorf("%w (%s)", errNoReplica, e.svc.Spec.Autoscaling.ScaleFromZeroTimeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
		m.mu.Lock()
		e.waiting--
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// release ends a request on b; failed marks b unready until its next
// probe passes, and wakes the reconciler to see to it.
func (m *Manager) release(service string, b *backend, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.inFlight--
	if !failed {
		return
	}
	if e, ok := m.svcs[service]; ok && e.replicas[b.job] == b {
		m.setReadyLocked(e, b, false)
		b.nextProbe = time.Time{}
	} else {
		b.ready = false
	}
	m.poke()
}

func (m *Manager) countTokens(service string, n int64) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	if e, ok := m.svcs[service]; ok {
		e.tokens += n
	}
	m.mu.Unlock()
	m.cfg.Metrics.addTokens(service, n)
}

// releaseBody calls release once the ReverseProxy closes the response.
type releaseBody struct {
	io.ReadCloser
	release func()
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// usageRE finds an OpenAI-style usage count in a response's tail.
var usageRE = regexp.MustCompile(`"total_tokens"\s*:\s*([0-9]{1,12})`)

// usageBody keeps the last few KiB of a response (JSON or an SSE stream)
// and, at its end, reports the last total_tokens it holds.
type usageBody struct {
	io.ReadCloser
	tail []byte
	done func(int64)
	once sync.Once
}

const usageTail = 4 << 10

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.tail = append(b.tail, p[:n]...)
	if len(b.tail) > 2*usageTail {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-usageTail:]...)
	}
	if err == io.EOF {
		b.report()
	}
	return n, err
}

func (b *usageBody) Close() error {
	b.report()
	return b.ReadCloser.Close()
}

func (b *usageBody) report() {
	b.once.Do(func() {
		ms := usageRE.FindAllSubmatch(b.tail, -1)
		if len(ms) == 0 {
			return
		}
		n, _ := strconv.ParseInt(string(ms[len(ms)-1][1]), 10, 64)
		b.done(n)
	})
}

// recorder remembers the status code and passes flushes through.
type recorder struct {
	http.ResponseWriter
	now   func() time.Time
	code  int
	first time.Time // when the status was written: the first byte
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code, r.first = code, r.now()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code, r.first = http.StatusOK, r.now()
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
