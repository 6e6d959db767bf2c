package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

const key = "k3y-0f-the-project"

// open starts a gate in front of handler (a replica that checks nothing)
// and returns its base URL.
func open(t *testing.T, replica http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: replica}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return openDial(t, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
}

func openDial(t *testing.T, dial func(context.Context) (net.Conn, error)) string {
	t.Helper()
	g, err := Open(Config{Addr: "127.0.0.1:0", Key: key, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return "http://" + g.Addr().String()
}

func get(t *testing.T, url, auth string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// TestGateLetsThroughOnlyTheKey: a replica that checks nothing is reached
// through the gate only with the service key; the key goes on to it.
func TestGateLetsThroughOnlyTheKey(t *testing.T) {
	t.Parallel()
	base := open(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "answered %s with %q", r.URL.Path, r.Header.Get("Authorization"))
	}))
	for name, tc := range map[string]struct {
		auth string
		want int
	}{
		"no key":           {"", http.StatusUnauthorized},
		"wrong key":        {"Bearer guess", http.StatusUnauthorized},
		"key as basic":     {"Basic " + key, http.StatusUnauthorized},
		"prefix of key":    {"Bearer " + key[:5], http.StatusUnauthorized},
		"key":              {"Bearer " + key, http.StatusOK},
		"key, lower case":  {"bearer " + key, http.StatusOK},
		"key with a space": {"Bearer  " + key, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, base+"/v1/models", tc.auth)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusOK && body != fmt.Sprintf("answered /v1/models with %q", tc.auth) {
				t.Fatalf("the replica saw %s", body)
			}
		})
	}
}

// TestGateWithoutKeyRefusesAll: a replica whose spec holds no key (a
// server without a vault) is reachable by nobody, not by everybody.
func TestGateWithoutKeyRefusesAll(t *testing.T) {
	t.Parallel()
	g, err := Open(Config{Addr: "127.0.0.1:0", Dial: func(context.Context) (net.Conn, error) { return nil, errors.New("never") }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		if resp, _ := get(t, "http://"+g.Addr().String()+"/", auth); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%q: %d", auth, resp.StatusCode)
		}
	}
}

// TestGateStreams: Server-Sent Events reach the caller as the replica
// flushes them, not when the response ends.
func TestGateStreams(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	base := open(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	req, _ := http.NewRequest("GET", base+"/v1/completions", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 3 {
		// Each event arrives while the replica waits to send the next.
		line, err := rd.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		rd.ReadString('\n')
		next <- struct{}{}
	}
}

// TestGateSaysWhenNothingWasReached: a replica not listening gives 502
// marked unreachable (the proxy may retry anywhere); a replica that dies
// with the request gives a broken connection, never that mark, and a
// replica cannot forge the mark.
func TestGateSaysWhenNothingWasReached(t *testing.T) {
	t.Parallel()
	down := openDial(t, func(context.Context) (net.Conn, error) { return nil, errors.New("connection refused") })
	resp, _ := get(t, down+"/", "Bearer "+key)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(model.ReplicaUnreachableHeader) == "" {
		t.Fatalf("a replica not listening: %d %v", resp.StatusCode, resp.Header)
	}

	dies := open(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/forge" {
			w.Header().Set(model.ReplicaUnreachableHeader, "1")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close() // as a crash would
	}))
	req, _ := http.NewRequest("POST", dies+"/crash", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+key)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a replica that died with the request: answered %d, want a broken connection", resp.StatusCode)
	}
	resp, _ = get(t, dies+"/forge", "Bearer "+key)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(model.ReplicaUnreachableHeader) != "" {
		t.Fatalf("a replica's own 502: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestGateCloseFreesThePort: after Close the port can be listened on
// again at once (the replacement replica's gate).
func TestGateCloseFreesThePort(t *testing.T) {
	t.Parallel()
	g, err := Open(Config{Addr: "127.0.0.1:0", Key: key, Dial: func(context.Context) (net.Conn, error) { return nil, errors.New("down") }})
	if err != nil {
		t.Fatal(err)
	}
	addr := g.Addr().String()
	g.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g2, err := Open(Config{Addr: addr, Key: key})
		if err == nil {
			g2.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the port stayed taken after Close: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // bounded by the deadline
	}
}
