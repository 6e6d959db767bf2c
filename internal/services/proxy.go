package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
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

// failedFor is how long a proxy sends no new request to a replica that
// failed one, unless the table drops and lists it again first (the server
// probes it meanwhile).
const failedFor = 2 * time.Second

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	Clock clock.Clock
	// Metrics receives the request, latency and token series; nil: none.
	Metrics *Metrics
	// StripCookies are cookie names never forwarded to a replica nor let
	// set by one (the dashboard's session cookies).
	StripCookies []string
	// Reserved are host names never routed to a service (the API's own).
	Reserved []string
	// KeyOK says whether r carries one of the API keys of rt, an apiKey
	// service; nil refuses every key.
	KeyOK func(r *http.Request, rt *model.ProxyRoute) bool
	// Demand, when set, is called when a request starts waiting for a
	// replica of service (none is ready): the autoscaler must hear of it.
	Demand func(service string)
	// Failed, when set, is called when a request failed on a replica.
	Failed func(service, job string)
}

// Proxy serves /services/NAME/… and the services' hosts to their ready
// replicas, from a table it is given (Set): by the server's service
// manager in the server, by the endpoint list it follows in a separate
// `gpufleet proxy`. It is the one proxy both run. It is safe for
// concurrent use; its lock guards the table and the counts only, and no
// call is made with it held.
type Proxy struct {
	cfg ProxyConfig

	mu     sync.Mutex
	table  model.ProxyTable
	routes map[string]*route
	exact  map[string]string // host → service
	wild   map[string]string // "chat.example.com" of "*.chat.example.com" → service
}

// route is one service's state in a Proxy.
type route struct {
	rt       model.ProxyRoute
	replicas map[string]*upstream // by job: listed ones and unlisted ones still serving
	// changed is closed (and replaced) when a replica is listed, to wake
	// requests held for one.
	changed  chan struct{}
	waiting  int
	rate     rateMeter
	latency  latencyWindow // time to first byte
	requests int64         // since the last Take
	tokens   int64
	failed   []string
}

// upstream is one replica as a Proxy sees it.
type upstream struct {
	job, addr   string
	slot        int
	listed      bool
	inFlight    int
	failedUntil time.Time
}

// NewProxy returns a Proxy with an empty table.
func NewProxy(cfg ProxyConfig) *Proxy {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Proxy{cfg: cfg, routes: map[string]*route{}, exact: map[string]string{}, wild: map[string]string{}}
}

// Set replaces the table. Counts carry over for services and replicas
// that stay; requests in flight on a replica the table drops run on (it
// is draining); requests held for a replica wake when one is listed.
func (p *Proxy) Set(t model.ProxyTable) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.table = t
	clear(p.exact)
	clear(p.wild)
	seen := map[string]bool{}
	for _, rt := range t.Services {
		seen[rt.Name] = true
		for _, h := range rt.Hosts {
			if w, ok := strings.CutPrefix(h, "*."); ok {
				p.wild[w] = rt.Name
			} else {
				p.exact[h] = rt.Name
			}
		}
		r, ok := p.routes[rt.Name]
		if !ok {
			r = &route{replicas: map[string]*upstream{}, changed: make(chan struct{})}
			p.routes[rt.Name] = r
		}
		r.rt = rt
		listed := map[string]bool{}
		added := false
		for _, rep := range rt.Replicas {
			listed[rep.Job] = true
			u, ok := r.replicas[rep.Job]
			if ok && u.addr != rep.Address { // moved: requests at the old address finish there
				if u.inFlight > 0 {
					u.listed = false
					r.replicas[rep.Job+"@"+u.addr] = u
				}
				ok = false
			}
			if !ok {
				u = &upstream{job: rep.Job, addr: rep.Address}
				r.replicas[rep.Job] = u
			}
			if !u.listed {
				u.listed, u.failedUntil, added = true, time.Time{}, true
			}
			u.slot = rep.Slot
		}
		for id, u := range r.replicas {
			if !listed[id] {
				u.listed = false
				if u.inFlight == 0 {
					delete(r.replicas, id)
				}
			}
		}
		if added {
			close(r.changed)
			r.changed = make(chan struct{})
		}
	}
	for name, r := range p.routes {
		if !seen[name] {
			delete(p.routes, name)
			close(r.changed) // held requests find no service
		}
	}
}

// Table returns the table last Set.
func (p *Proxy) Table() model.ProxyTable {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.table
}

// Host returns the service host routes to: an exact host of a service,
// else a wildcard one, else NAME of NAME.DOMAIN (the table's domain) when
// service NAME exists. A reserved host (the API's) is never a service's.
func (p *Proxy) Host(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || slices.Contains(p.cfg.Reserved, host) {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if name, ok := p.exact[host]; ok {
		return name, true
	}
	label, parent, ok := strings.Cut(host, ".")
	if !ok || label == "" {
		return "", false
	}
	if name, ok := p.wild[parent]; ok {
		return name, true
	}
	if d := p.table.Domain; d != "" && parent == d {
		if _, ok := p.routes[label]; ok {
			return label, true
		}
	}
	return "", false
}

// ServeRoute serves r and reports true when it is a service's: on a
// service's host (Host), the whole path; at /services/NAME/…, the rest
// (/services/NAME redirects there). authorize is as for Serve. Anything
// else reports false, for the caller to serve.
func (p *Proxy) ServeRoute(w http.ResponseWriter, r *http.Request, authorize Authorize) bool {
	if name, ok := p.Host(r.Host); ok {
		p.Serve(w, r, name, r.URL.Path, authorize)
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/services/")
	if !ok {
		return false
	}
	name, rest, slash := strings.Cut(rest, "/")
	if name == "" {
		return false
	}
	if !slash {
		http.Redirect(w, r, "/services/"+name+"/", http.StatusPermanentRedirect)
		return true
	}
	p.Serve(w, r, name, "/"+rest, authorize)
	return true
}

// Authorize decides whether r may call rt, a token-auth service: 0, or
// the status to refuse with (401 without a valid token, 404 without a role
// in its project, 503 when it cannot be checked now).
type Authorize func(r *http.Request, rt *model.ProxyRoute) int

// proxyKey carries a request's route and state through the ReverseProxy
// to the transport.
type proxyKey struct{}

type proxyReq struct {
	service string
	key     string // the replica key sent to the replica ("" for none)
}

// Serve serves one request to service name; rest is the path the replica
// gets (after /services/NAME, or the whole path on a service's host).
// Who may call (the route's auth): public, anyone; apiKey, a bearer the
// KeyOK hook accepts (401 otherwise); token, whom authorize lets in (0,
// else the status to refuse with: 401 without a valid token, 404 without
// a role in the project, the answer for a service that does not exist).
// The caller's Authorization header is never forwarded; the replica gets
// the project's replica key there instead.
//
// Replicas are chosen by least outstanding requests among the listed
// ones. With none, a request waits for one (up to the service's
// scaleFromZeroTimeout, at most queueLimit of them, then 503 with
// Retry-After) and the Demand hook is told. A replica that fails before
// answering is set aside and the request goes to another: any request
// whose connection was refused, and idempotent ones (GET, HEAD, OPTIONS,
// or with an Idempotency-Key) on any transport error. Responses stream
// unbuffered (Server-Sent Events).
func (p *Proxy) Serve(w http.ResponseWriter, r *http.Request, name, rest string, authorize Authorize) {
	start := p.cfg.Clock.Now()
	p.mu.Lock()
	rt, ok := p.routes[name]
	var route model.ProxyRoute
	if ok {
		route = rt.rt
	}
	p.mu.Unlock()
	if !ok {
		http.Error(w, "no such service: "+name, http.StatusNotFound)
		return
	}
	code := 0
	switch route.Auth.Mode {
	case model.AuthPublic:
	case model.AuthAPIKey:
		if p.cfg.KeyOK == nil || !p.cfg.KeyOK(r, &route) {
			code = http.StatusUnauthorized
		}
	default:
		if authorize == nil {
			code = http.StatusUnauthorized
		} else {
			code = authorize(r, &route)
		}
	}
	switch code {
	case 0:
	case http.StatusNotFound, http.StatusForbidden:
		http.Error(w, "no such service: "+name, http.StatusNotFound)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the caller's credentials cannot be checked now; retry", code)
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpufleet"`)
		what := "a gpufleet token with a role in the service's project"
		if route.Auth.Mode == model.AuthAPIKey {
			what = "one of the service's API keys"
		}
		http.Error(w, fmt.Sprintf("service %s needs %s as Authorization: Bearer …", name, what), code)
	}
	if code != 0 {
		if code == http.StatusForbidden {
			code = http.StatusNotFound
		}
		p.cfg.Metrics.observe(name, code, p.cfg.Clock.Now().Sub(start))
		return
	}
	r.Header.Del("Authorization") // the caller's token or key stays here
	p.mu.Lock()
	if rt, ok := p.routes[name]; ok {
		rt.requests++
		rt.rate.add(start)
	}
	p.mu.Unlock()
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
	pr := &proxyReq{service: name, key: route.ReplicaKey}
	r = r.WithContext(context.WithValue(r.Context(), proxyKey{}, pr))
	rec := &recorder{ResponseWriter: w, now: p.cfg.Clock.Now}
	p.reverseProxy(rest).ServeHTTP(rec, r)
	code = rec.code
	if code == 0 {
		code = 499 // the client left before an answer
	} else {
		p.mu.Lock()
		if rt, ok := p.routes[name]; ok {
			rt.latency.add(rec.first, rec.first.Sub(start))
		}
		p.mu.Unlock()
	}
	p.cfg.Metrics.observe(name, code, p.cfg.Clock.Now().Sub(start))
}

func (p *Proxy) reverseProxy(rest string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "replica" // the transport picks the host
			pr.Out.URL.Path, pr.Out.URL.RawPath = rest, ""
			pr.Out.Host = ""
			pr.SetXForwarded()
			stripCookies(pr.Out.Header, p.cfg.StripCookies)
			if key := pr.In.Context().Value(proxyKey{}).(*proxyReq).key; key != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+key)
			}
		},
		Transport:     (*replicaTransport)(p),
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if cs := resp.Header.Values("Set-Cookie"); len(cs) > 0 {
				resp.Header.Del("Set-Cookie")
				for _, c := range cs {
					if !slices.Contains(p.cfg.StripCookies, strings.TrimSpace(strings.SplitN(c, "=", 2)[0])) {
						resp.Header.Add("Set-Cookie", c)
					}
				}
			}
			pr := resp.Request.Context().Value(proxyKey{}).(*proxyReq)
			resp.Body = &usageBody{ReadCloser: resp.Body, done: func(n int64) { p.countTokens(pr.service, n) }}
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

// Take returns what the proxy measured of each service and resets the
// request and token counts (the next Take counts from here).
func (p *Proxy) Take() map[string]model.ProxyLoad {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]model.ProxyLoad, len(p.routes))
	for name, r := range p.routes {
		l := model.ProxyLoad{Waiting: r.waiting, InFlight: r.waiting, Rate: r.rate.rate(now), Requests: r.requests, Tokens: r.tokens,
			Latency: r.latency.counts(now), Failed: r.failed}
		r.requests, r.tokens, r.failed = 0, 0, nil
		for _, u := range r.replicas {
			if u.inFlight > 0 {
				if l.Replicas == nil {
					l.Replicas = map[string]int{}
				}
				l.Replicas[u.job] += u.inFlight
				l.InFlight += u.inFlight
			}
		}
		out[name] = l
	}
	return out
}

// replicaTransport sends each request to a replica the Proxy picks, and
// to another when that one fails in a way that is safe to retry.
type replicaTransport Proxy

// maxTries bounds the replicas one request is sent to.
const maxTries = 3

func (t *replicaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := (*Proxy)(t)
	pr := req.Context().Value(proxyKey{}).(*proxyReq)
	tried := map[string]bool{}
	var lastErr error
	for try := 0; try < maxTries; try++ {
		u, err := p.acquire(req.Context(), pr.service, tried)
		if err != nil {
			if lastErr != nil && !errors.Is(err, context.Canceled) {
				return nil, fmt.Errorf("%w (after: %v)", err, lastErr)
			}
			return nil, err
		}
		out := req.Clone(req.Context())
		out.URL.Host = u.addr
		if try > 0 && req.GetBody != nil {
			if out.Body, err = req.GetBody(); err != nil {
				p.release(pr.service, u, false)
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
			resp.Body = &releaseBody{ReadCloser: resp.Body, release: func() { once.Do(func() { p.release(pr.service, u, false) }) }}
			return resp, nil
		}
		p.release(pr.service, u, true)
		lastErr = err
		tried[u.job] = true
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

// acquire picks the listed replica of service with the fewest requests
// outstanding (not one in tried, nor one that failed lately) and counts
// the request on it, waiting for one while there is none.
func (p *Proxy) acquire(ctx context.Context, service string, tried map[string]bool) (*upstream, error) {
	var timer <-chan time.Time
	for {
		now := p.cfg.Clock.Now()
		p.mu.Lock()
		r, ok := p.routes[service]
		if !ok {
			p.mu.Unlock()
			return nil, errNoService
		}
		var best *upstream
		for _, u := range r.replicas {
			if !u.listed || tried[u.job] || now.Before(u.failedUntil) {
				continue
			}
			if best == nil || u.inFlight < best.inFlight || (u.inFlight == best.inFlight && u.slot < best.slot) {
				best = u
			}
		}
		if best != nil {
			best.inFlight++
			p.mu.Unlock()
			return best, nil
		}
		if r.waiting >= r.rt.QueueLimit {
			p.mu.Unlock()
			return nil, errQueueFull
		}
		wait := r.rt.ScaleFromZeroTimeout
		if timer == nil {
			timer = p.cfg.Clock.After(wait.D())
		}
		r.waiting++
		changed := r.changed
		p.mu.Unlock()
		if p.cfg.Demand != nil {
			p.cfg.Demand(service)
		}
		var err error
		select {
		case <-changed:
		case <-timer:
			err = fmt.Errorf("%w (%s)", errNoReplica, wait)
		case <-ctx.Done():
			err = ctx.Err()
		}
		p.mu.Lock()
		r.waiting--
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// release ends a request on u; failed sets u aside for failedFor and
// tells the Failed hook.
func (p *Proxy) release(service string, u *upstream, failed bool) {
	p.mu.Lock()
	u.inFlight--
	if failed {
		u.failedUntil = p.cfg.Clock.Now().Add(failedFor)
	}
	if r, ok := p.routes[service]; ok {
		if failed {
			r.failed = append(r.failed, u.job)
		}
		if !u.listed && u.inFlight == 0 {
			for id, v := range r.replicas {
				if v == u {
					delete(r.replicas, id)
				}
			}
		}
	}
	p.mu.Unlock()
	if failed && p.cfg.Failed != nil {
		p.cfg.Failed(service, u.job)
	}
}

func (p *Proxy) countTokens(service string, n int64) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	if r, ok := p.routes[service]; ok {
		r.tokens += n
	}
	p.mu.Unlock()
	p.cfg.Metrics.addTokens(service, n)
}

// bearer returns the token of an "Authorization: Bearer TOKEN" value.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	return tok, ok && strings.EqualFold(scheme, "Bearer") && tok != ""
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
