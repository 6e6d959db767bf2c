package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/cliconfig"
	"github.com/gpufleet/gpufleet/internal/server"
)

// Files `up` and `server` write into the data dir (internal/server).
const (
	serverFile    = server.InfoFile
	tokenFile     = server.TokenFile
	secretKeyFile = server.SecretKeyFile
	dbFile        = server.DBFile
	tlsDir        = server.TLSDir
	tlsCertFile   = server.TLSCertFile
	tlsKeyFile    = server.TLSKeyFile
)

// serverInfo is what a running server tells local clients.
type serverInfo = server.Info

func defaultDataDir() string {
	if d := os.Getenv("GPUFLEET_DATA_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".gpufleet"
	}
	return filepath.Join(home, ".gpufleet")
}

// target is where client commands go and as whom.
type target struct {
	server, token, project, ca string
	// context is the CLI context the server came from ("" for none).
	context string
}

// target resolves the server, token and default project: flags first
// (--server, --token, --project, --context), then the environment
// (GPUFLEET_SERVER, GPUFLEET_TOKEN, inside a job its GPUFLEET_JOB_TOKEN,
// GPUFLEET_PROJECT), then the CLI config's current context (`gpufleet
// login`), then the files a local server wrote into the data dir. A
// context's token is only ever sent to that context's server.
func (g *globals) target() (target, error) {
	var t target
	cfg, err := cliconfig.Load(g.configPath())
	if err != nil {
		return t, err
	}
	ctxName := g.contextName
	if ctxName == "" {
		ctxName = os.Getenv("GPUFLEET_CONTEXT")
	}
	var cx *cliconfig.Context
	switch {
	case g.server != "":
		t.server = g.server
	case g.contextName != "":
		// An explicit --context beats the environment.
	case os.Getenv("GPUFLEET_SERVER") != "":
		t.server = os.Getenv("GPUFLEET_SERVER")
	}
	if cx, err = cfg.Current(ctxName); err != nil {
		return t, err
	}
	if cx != nil && ctxName == "" && t.server == "" && g.localFirst && fileExists(filepath.Join(g.dataDir, serverFile)) {
		cx = nil // the named data dir's own server
	}
	if cx != nil && (t.server == "" || strings.TrimRight(t.server, "/") == strings.TrimRight(cx.Server, "/")) {
		t.server, t.context, t.ca = cx.Server, cx.Name, cx.CA
	} else {
		cx = nil
	}
	t.token = cmpOr(g.token, cmpOr(os.Getenv("GPUFLEET_TOKEN"), os.Getenv("GPUFLEET_JOB_TOKEN")))
	if t.token == "" && cx != nil {
		t.token = cx.Token
	}
	t.project = cmpOr(g.project, os.Getenv("GPUFLEET_PROJECT"))
	if t.project == "" && cx != nil {
		t.project = cx.Project
	}
	if t.server == "" {
		data, err := os.ReadFile(filepath.Join(g.dataDir, serverFile))
		if errors.Is(err, os.ErrNotExist) {
			return t, fmt.Errorf("no gpufleet server found: log in to one with `gpufleet login SERVER`, start one here with `gpufleet up` (data dir %s), or set GPUFLEET_SERVER and GPUFLEET_TOKEN", g.dataDir)
		}
		if err != nil {
			return t, fmt.Errorf("reading server address: %w", err)
		}
		var info serverInfo
		if err := json.Unmarshal(data, &info); err != nil || info.URL == "" {
			return t, fmt.Errorf("%s is damaged; restart the server with `gpufleet up`", filepath.Join(g.dataDir, serverFile))
		}
		t.server = info.URL
	}
	if t.token == "" {
		data, err := os.ReadFile(filepath.Join(g.dataDir, tokenFile))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return t, fmt.Errorf("reading admin token: %w", err)
		}
		t.token = strings.TrimSpace(string(data))
		if t.token == "" {
			return t, fmt.Errorf("no token for %s: log in with `gpufleet login %s`, set GPUFLEET_TOKEN, or run `gpufleet up` once to create %s", t.server, t.server, filepath.Join(g.dataDir, tokenFile))
		}
	}
	return t, nil
}

// client returns an API client for the resolved target.
func (g *globals) client() (*client.Client, error) {
	t, err := g.target()
	if err != nil {
		return nil, err
	}
	return clientFor(t, g.dataDir)
}

// defaultProject is the project commands use when none is named: --project,
// GPUFLEET_PROJECT, then the current context's ("" lets the server decide).
func (g *globals) defaultProject() string {
	if p := cmpOr(g.project, os.Getenv("GPUFLEET_PROJECT")); p != "" {
		return p
	}
	if t, err := g.target(); err == nil {
		return t.project
	}
	return ""
}

func (g *globals) configPath() string { return cmpOr(g.config, cliconfig.DefaultPath()) }

func clientFor(t target, dataDir string) (*client.Client, error) {
	var hc *http.Client
	var err error
	if t.ca != "" && strings.HasPrefix(t.server, "https://") {
		hc, err = pinnedClient(t.ca, 64)
	} else {
		hc, err = httpClientFor(t.server, dataDir)
	}
	if err != nil {
		return nil, err
	}
	c := client.New(t.server, t.token, hc)
	c.OnBusy(func(b client.Busy) { // the wait is progress, not a failure: say so
		fmt.Fprintf(os.Stderr, "gpufleet: the server is busy (%d); sending %s %s again in %s (retry %d)\n", b.Status, b.Method, b.Path, b.Wait.Round(100*time.Millisecond), b.Try)
	})
	return c, nil
}

// httpClientFor returns the HTTP client for server: for https, one that
// pins GPUFLEET_CA (inside a job, the certificate its agent wrote into the
// job's tree), else the certificate `up --tls` made in dataDir ("" for
// none), else nil, the system's roots (a real certificate).
func httpClientFor(server, dataDir string) (*http.Client, error) {
	if !strings.HasPrefix(server, "https://") {
		return nil, nil
	}
	ca := os.Getenv("GPUFLEET_CA")
	if ca == "" && dataDir != "" {
		if own := filepath.Join(dataDir, tlsDir, tlsCertFile); fileExists(own) {
			ca = own
		}
	}
	if ca == "" {
		return nil, nil
	}
	return pinnedClient(ca, 64)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pinnedClient returns an HTTP client that trusts only the certificates
// (a server's self-signed one, or a CA) in caFile.
func pinnedClient(caFile string, maxIdle int) (*http.Client, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil, // the server is named explicitly
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool},
		MaxIdleConnsPerHost: maxIdle,
		IdleConnTimeout:     90 * time.Second,
	}}, nil
}
