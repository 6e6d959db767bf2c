package podsync

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestGateAdmitsOnlyTheKey runs a pod's gate (the agent's gate code,
// dialling the app on loopback) in front of an app that checks nothing,
// over real TCP on 127.0.0.1: a request without the replica key, or with
// another, gets 401 and never reaches the app; with it, the request and
// its key reach the app; once the app stops listening the gate says so
// (502, marked unreachable) rather than hang.
func TestGateAdmitsOnlyTheKey(t *testing.T) {
	t.Parallel()
	const key = "0123456789abcdef-replica-key"
	appLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int32
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprintf(w, "app saw %s %s", r.URL.Path, r.Header.Get("Authorization"))
	})}
	go app.Serve(appLn)
	appPort := appLn.Addr().(*net.TCPAddr).Port

	g, err := OpenGate(GateConfig{Listen: "127.0.0.1:0", AppPort: appPort, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	base := "http://" + g.Addr().String()
	do := func(auth string) (int, string, http.Header) {
		t.Helper()
		return testutil.Call(t, "GET", base+"/v1/models", "", "Authorization", auth)
	}
	for name, auth := range map[string]string{"no key": "", "another key": "Bearer guess", "key as basic": "Basic " + key} {
		if code, body, _ := do(auth); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %q, want 401", name, code, body)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the app was reached %d times without the key", n)
	}
	code, body, _ := do("Bearer " + key)
	if want := "app saw /v1/models Bearer " + key; code != http.StatusOK || body != want {
		t.Errorf("with the key: %d %q, want 200 %q", code, body, want)
	}
	app.Close()
	code, _, h := do("Bearer " + key)
	if code != http.StatusBadGateway || h.Get(model.ReplicaUnreachableHeader) == "" {
		t.Errorf("app gone: %d, %s=%q; want 502 marked unreachable", code, model.ReplicaUnreachableHeader, h.Get(model.ReplicaUnreachableHeader))
	}
}

func TestGateRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]GateConfig{
		"no key":      {Listen: "127.0.0.1:0", AppPort: 8000},
		"no app port": {Listen: "127.0.0.1:0", Key: "k"},
		"port 70000":  {Listen: "127.0.0.1:0", AppPort: 70000, Key: "k"},
	} {
		if g, err := OpenGate(cfg); err == nil {
			g.Close()
			t.Errorf("%s: opened", name)
		}
	}
}

// TestServeGateStopsWithItsContext: the sidecar's gate stops listening
// when the kubelet stops it (its context ends).
func TestServeGateStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeGate(ctx, GateConfig{Listen: addr, AppPort: 1, Key: "k"}) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gate never listened")
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("ServeGate returned before its context ended: %v", err)
		default:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("still listening on %s after its context ended", addr)
	}
}
