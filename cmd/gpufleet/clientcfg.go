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

// newClient finds the server and token: GPUFLEET_SERVER and GPUFLEET_TOKEN
// first (inside a job, its own GPUFLEET_JOB_TOKEN), then the files a local
// server wrote into the data dir.
func newClient(dataDir string) (*client.Client, error) {
	server, token := os.Getenv("GPUFLEET_SERVER"), cmpOr(os.Getenv("GPUFLEET_TOKEN"), os.Getenv("GPUFLEET_JOB_TOKEN"))
	if server == "" {
		data, err := os.ReadFile(filepath.Join(dataDir, serverFile))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no gpufleet server found: start one with `gpufleet up` (data dir %s), or set GPUFLEET_SERVER and GPUFLEET_TOKEN", dataDir)
		}
		if err != nil {
			return nil, fmt.Errorf("reading server address: %w", err)
		}
		var info serverInfo
		if err := json.Unmarshal(data, &info); err != nil || info.URL == "" {
			return nil, fmt.Errorf("%s is damaged; restart the server with `gpufleet up`", filepath.Join(dataDir, serverFile))
		}
		server = info.URL
	}
	if token == "" {
		data, err := os.ReadFile(filepath.Join(dataDir, tokenFile))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("reading admin token: %w", err)
		}
		token = strings.TrimSpace(string(data))
		if token == "" {
			return nil, fmt.Errorf("no token: set GPUFLEET_TOKEN, or run `gpufleet up` once to create %s", filepath.Join(dataDir, tokenFile))
		}
	}
	hc, err := httpClientFor(server, dataDir)
	if err != nil {
		return nil, err
	}
	return client.New(server, token, hc), nil
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
