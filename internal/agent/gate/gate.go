// Package gate fronts a service replica on its node. The replica listens
// inside a network namespace of its own, which no other workload can
// reach; the gate listens on the replica's port on the host and forwards
// into that namespace only the requests that carry the service key the
// server's proxy sends ("Authorization: Bearer KEY"). Another tenant's job
// on the node, or on any host that reaches it, meets the gate, never the
// replica, whether or not the replica checks the key itself.
package gate

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Config configures a Gate.
type Config struct {
	// Addr is where the gate listens (":8000").
	Addr string
	// Key is the service key a request must present; empty refuses
	// every request.
	Key string
	// Dial connects to the replica (inside its namespace). An error
	// means nothing reached the replica.
	Dial func(ctx context.Context) (net.Conn, error)
	Log  *slog.Logger
}

// Gate is one replica's listener. It is safe for concurrent use.
type Gate struct {
	ln  net.Listener
	srv *http.Server
}

// Open listens on cfg.Addr and serves until Close.
func Open(cfg Config) (*Gate, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := cfg.Dial(ctx)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "replica"
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		// Server-Sent Events pass through as the replica writes them.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// Only the gate says that nothing reached the replica.
			resp.Header.Del(model.ReplicaUnreachableHeader)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var de *dialError
			if errors.As(err, &de) {
				// Nothing reached the replica: the proxy may send the
				// request to another one, whatever its method.
				w.Header().Set(model.ReplicaUnreachableHeader, "1")
				http.Error(w, "the replica is not listening", http.StatusBadGateway)
				return
			}
			if r.Context().Err() == nil {
				log.Debug("replica failed a request", "err", err)
			}
			// The replica may have seen the request: end the connection
			// as the replica's own failure would, so the proxy retries
			// only what is safe to send twice.
			panic(http.ErrAbortHandler)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	g := &Gate{ln: ln}
	g.srv = &http.Server{
		Handler:           handler(cfg.Key, rp),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("service gate stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return g, nil
}

// handler lets through requests with "Authorization: Bearer key".
func handler(key string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(key, r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpufleet service replica"`)
			http.Error(w, "this replica answers only its service's proxy: call https://SERVER/services/NAME/ instead", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func authorized(key, header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if key == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(key)) == 1
}

// Addr is where the gate listens.
func (g *Gate) Addr() net.Addr { return g.ln.Addr() }

// Close stops listening and ends the connections open through the gate.
func (g *Gate) Close() error { return g.srv.Close() }

// Shutdown stops listening and waits, until ctx ends, for the requests
// under way to finish; then it ends the connections left.
func (g *Gate) Shutdown(ctx context.Context) error {
	err := g.srv.Shutdown(ctx)
	if err != nil {
		g.srv.Close()
	}
	return err
}

// dialError marks a failure to reach the replica at all.
type dialError struct{ err error }

func (e *dialError) Error() string { return "reaching the replica: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
