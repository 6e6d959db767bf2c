package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/services"
	"github.com/gpufleet/gpufleet/internal/web"
)

// proxyFlags are `gpufleet proxy`'s settings.
type proxyFlags struct {
	listen, metricsListen string
	tlsCert, tlsKey       string
	shutdownTimeout       time.Duration
	reserved              []string
}

func newProxyCmd(g *globals) *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Serve the services' routes from another machine (scale-out): a proxy that follows the server's endpoint list",
		Long: `Runs the service proxy the server runs, as a process of its own: it serves
/services/NAME/… and the services' hosts (spec.hosts, and NAME.DOMAIN under the
server's --services-domain) on --listen, to the ready replicas the server lists,
with the same balancing (least outstanding requests), retries, unbuffered
streaming and holding of requests while a service scales from zero. It watches
the server's endpoint list and reports its load every second (at once when a
request waits for a replica), so the server's autoscaler sees every proxy's
traffic. It asks the server whether a caller may use a service (sending the
SHA-256 of the caller's bearer, never the secret) and remembers the answer 10 s.

It needs a proxy token (gpufleet tokens create NAME --kind proxy), which reads
the endpoint list, reports load and checks callers, and nothing else; the list
holds the projects' replica keys, so keep the token on the proxy's machine.
Replicas are dialled at the addresses the server dials (the agents' --address),
so the proxy must reach the nodes' network. On SIGTERM it stops taking
requests and lets those in flight finish (--shutdown-timeout).`,
		Example: `  gpufleet tokens create edge-1 --kind proxy --ttl 90d
  GPUFLEET_TOKEN=gfp_… gpufleet proxy --server https://gpufleet.example.com:7777 --listen 0.0.0.0:8443 \
      --tls-cert svc.crt --tls-key svc.key
  curl -H "Authorization: Bearer $GPUFLEET_TOKEN" https://edge-1:8443/services/llm/v1/models`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return runProxy(cmd.Context(), c, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8780", "address the services' routes are served on")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "also serve Prometheus metrics (/metrics) on this address (default: none)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key), e.g. one for *.DOMAIN")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long requests in flight (streams) may take to finish")
	fl.StringSliceVar(&f.reserved, "reserved-host", nil, "host names never routed to a service (e.g. the server's own, when it shares the proxy's address)")
	return cmd
}

func runProxy(ctx context.Context, c *client.Client, f proxyFlags) error {
	var fe model.FieldErrors
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		fe.Add("--listen", fmt.Sprintf("%q is not host:port", f.listen))
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		fe.Add("--tls-cert", "and --tls-key go together")
	}
	if f.shutdownTimeout < 0 {
		fe.Add("--shutdown-timeout", "must not be negative")
	}
	if err := fe.Err(); err != nil {
		return usageError{err}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "proxy")
	// One read first, so a wrong token or server fails here, clearly.
	first, cancelFirst := context.WithTimeout(ctx, 30*time.Second)
	_, err := c.ProxyEndpoints(first, 0)
	cancelFirst()
	if err != nil {
		return fmt.Errorf("reading the services' endpoints from %s (the token must be a proxy token: gpufleet tokens create NAME --kind proxy): %w", c.Server(), err)
	}
	reg := prometheus.NewRegistry()
	met, err := services.NewMetrics(reg)
	if err != nil {
		return err
	}
	reserved := make([]string, len(f.reserved))
	for i, h := range f.reserved {
		reserved[i] = strings.ToLower(h)
	}
	// Its own context: it keeps reporting while requests drain.
	rctx, stopRemote := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRemote()
	remote := services.NewRemote(services.RemoteConfig{Server: c, Log: log, Metrics: met, Reserved: reserved,
		StripCookies: []string{web.SessionCookie, web.CSRFCookie}})
	done := make(chan error, 1)
	go func() { done <- remote.Run(rctx) }()

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: remote, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 2)
	go func() {
		if f.tlsCert != "" {
			errc <- srv.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	var msrv *http.Server
	if f.metricsListen != "" {
		mln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		msrv = &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- msrv.Serve(mln) }()
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	log.Info("gpufleet proxy is up", "url", scheme+"://"+ln.Addr().String(), "server", c.Server())
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	log.Info("shutting down: no new requests; waiting for those in flight", "bound", f.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if msrv != nil {
		_ = msrv.Close()
	}
	stopRemote()
	<-done
	if err != nil {
		return fmt.Errorf("shutting down with requests in flight: %w", err)
	}
	return nil
}
