package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// proxyProc is a `gpufleet proxy` process.
type proxyProc struct {
	cmd    *exec.Cmd
	listen string
	out    *testutil.SyncBuffer
}

// startProxy runs `gpufleet proxy` against s with a proxy token, and
// waits until it has read the endpoint list.
func startProxy(t *testing.T, s *serverProc, token string) *proxyProc {
	t.Helper()
	p := &proxyProc{listen: freePort(t), out: &testutil.SyncBuffer{}}
	p.cmd = exec.Command(binary, "proxy", "--server", "http://"+s.listen, "--listen", p.listen, "--shutdown-timeout", "10s")
	p.cmd.Env = append(cleanEnv(), "GPUFLEET_TOKEN="+token)
	p.cmd.Dir = cliDir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // polling a child's readiness; bounded
		if resp, err := http.Get("http://" + p.listen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not come up:\n%s", p.out)
		}
	}
}

// call sends a completion to url through the proxy with host and bearer
// (either may be empty) and returns the status and body.
func call(t *testing.T, url, host, bearer, body string) (int, string) {
	t.Helper()
	var hdr []string
	if host != "" {
		hdr = append(hdr, "Host", host)
	}
	if bearer != "" {
		hdr = append(hdr, "Authorization", "Bearer "+bearer)
	}
	code, b, _ := testutil.Call(t, "POST", url, body, hdr...)
	return code, b
}

// TestServiceBehindSeparateProxy: a `gpufleet proxy` process in front of
// the server, holding a proxy token that can do nothing else, serves a
// token-auth service with min 0 by path, by its own host and by
// NAME.DOMAIN: the first request is held while the server, told of it by
// the proxy's load report, scales from zero; a stream passes unbuffered;
// the proxy's load scales the service up and, once it stops, back to 0;
// its requests are counted by the server; and it keeps serving across a
// server restart.
func TestServiceBehindSeparateProxy(t *testing.T) {
	replica := buildReplica(t)
	s := startServer(t, t.TempDir(), freePort(t), "--services-domain", "svc.test")
	port := testutil.PortRun(t, 8)
	manifest := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: edge}
spec:
  template:
    run: {command: [%q], env: {REPLY: edge}}
    resources: {gpus: 0}
  port: %d
  readiness: {path: /health, period: 200ms}
  replicas: {min: 0, max: 2}
  autoscaling: {metric: inflight, target: 2, scaleDownWindow: 3s, scaleFromZeroTimeout: 60s}
  hosts: [chat.example.test]
`, replica, port)
	s.applyService(manifest)
	var created api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleetOut("tokens", "create", "edge-1", "--kind", "proxy", "-o", "json")), &created); err != nil {
		t.Fatal(err)
	}
	proxyToken := created.Secret
	admin, err := os.ReadFile(filepath.Join(s.dataDir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	user := strings.TrimSpace(string(admin))

	// Least privilege: the proxy token reads no job, submits nothing,
	// and cannot call a service as a user.
	for _, r := range [][2]string{{"GET", "/v1/jobs"}, {"GET", "/v1/services"}, {"POST", "/v1/services"}, {"GET", "/v1/tokens"}} {
		req, _ := http.NewRequest(r[0], "http://"+s.listen+r[1], strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s with the proxy token: %d, want 403", r[0], r[1], resp.StatusCode)
		}
	}
	if code, _ := call(t, "http://"+s.listen+"/services/edge/v1/completions", "", proxyToken, `{}`); code != http.StatusUnauthorized {
		t.Errorf("the proxy token as a caller of the service: %d, want 401", code)
	}

	p := startProxy(t, s, proxyToken)
	base := "http://" + p.listen
	if code, _ := call(t, base+"/services/edge/v1/completions", "", "", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("no token at the proxy: %d, want 401", code)
	}
	start := time.Now()
	code, body := call(t, base+"/services/edge/v1/completions", "", user, `{"prompt":"one two"}`)
	if code != 200 || !strings.Contains(body, `"text":"edge"`) {
		t.Fatalf("the first request through the proxy (scale from zero): %d %s\nproxy log:\n%s\nserver log:\n%s", code, body, p.out, s.out)
	}
	t.Logf("scale from zero through the separate proxy to the first response: %s", time.Since(start).Round(time.Millisecond))
	for _, host := range []string{"chat.example.test", "edge.svc.test:8080"} {
		if code, body := call(t, base+"/v1/completions", host, user, `{"prompt":"by host"}`); code != 200 || !strings.Contains(body, `"text":"edge"`) {
			t.Fatalf("Host %s: %d %s", host, code, body)
		}
	}
	if code, _ := call(t, base+"/v1/completions", "other.svc.test", user, `{}`); code != http.StatusNotFound {
		t.Fatalf("a host of no service: %d, want 404", code)
	}
	// The server routes the same hosts.
	if code, body := call(t, "http://"+s.listen+"/v1/completions", "chat.example.test", user, `{"prompt":"x"}`); code != 200 || !strings.Contains(body, `"text":"edge"`) {
		t.Fatalf("Host chat.example.test at the server: %d %s", code, body)
	}
	// A streamed completion: each event passes as the replica sends it.
	req, _ := http.NewRequest("POST", base+"/services/edge/v1/completions", strings.NewReader(`{"prompt":"x","stream":true}`))
	req.Header.Set("Authorization", "Bearer "+user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(string(stream), "data: ") != 5 {
		t.Fatalf("stream through the proxy: %s %q", resp.Header.Get("Content-Type"), stream)
	}
	waitServiceView(t, s, "edge", "the proxy's requests counted by the server", func(v api.ServiceView) bool { return v.Requests >= 5 }, nil)

	// Load through the proxy alone scales the service to its max, and
	// back to 0 once it stops.
	ld := startServiceLoad(base+"/services/edge/v1/completions", 6, http.Header{"Authorization": {"Bearer " + user}})
	waitServiceView(t, s, "edge", "2 ready replicas on the proxy's load", func(v api.ServiceView) bool { return v.Ready == 2 }, ld)
	ld.halt()
	if ld.failed.Load() != 0 || ld.ok.Load() == 0 {
		t.Fatalf("load through the proxy: %d ok, %d failed (last: %v)", ld.ok.Load(), ld.failed.Load(), ld.lastErr.Load())
	}
	t.Logf("load through the proxy: %d requests, 0 failed", ld.ok.Load())
	waitServiceView(t, s, "edge", "scaled back to 0", func(v api.ServiceView) bool { return v.Desired == 0 && len(v.Replicas) == 0 }, nil)
	// The proxy's load took it to 2 replicas: by an inflight scale-up from
	// 1, or straight from zero when the one replica of the first request had
	// already been scaled away (3 s of no traffic before the load began, as
	// on a loaded machine); the scale-down is inflight's either way.
	if ex := s.gpufleet("explain", "service", "edge"); !strings.Contains(ex, "scale from zero") ||
		!(strings.Contains(ex, "→ 2: inflight") || strings.Contains(ex, "0 → 2: scale from zero")) ||
		!strings.Contains(ex, "→ 0: inflight below target") {
		t.Fatalf("explain service:\n%s", ex)
	}

	// The server restarts on the same address: the proxy follows it again
	// and serves from zero once more.
	s.kill()
	s = startServer(t, s.dataDir, s.listen, "--services-domain", "svc.test")
	if code, body := call(t, base+"/services/edge/v1/completions", "", user, `{"prompt":"again"}`); code != 200 {
		t.Fatalf("through the proxy after a server restart: %d %s\nproxy log:\n%s", code, body, p.out)
	}
	// SIGTERM: the proxy stops taking requests and exits cleanly.
	_ = p.cmd.Process.Signal(os.Interrupt)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the proxy's exit: %v\n%s", err, p.out)
	}
}
