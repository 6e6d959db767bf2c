package imds

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// mockVersion is the amazon-ec2-metadata-mock release .ci/run builds into
// ~/.cache/gpufleet/ec2-metadata-mock-<version>/.
const mockVersion = "v1.13.0"

// mockBinary finds AWS's ec2-metadata-mock: $GPUFLEET_EC2_METADATA_MOCK,
// the CI cache, or PATH. With CI=true a missing binary fails the test.
func mockBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUFLEET_EC2_METADATA_MOCK"); p != "" {
		return p
	}
	cache := os.Getenv("GPUFLEET_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "gpufleet")
	}
	if p := filepath.Join(cache, "ec2-metadata-mock-"+mockVersion, "ec2-metadata-mock"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("ec2-metadata-mock"); err == nil {
		return p
	}
	msg := "ec2-metadata-mock not found: go install github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@" + mockVersion + " (or run .ci/run)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// startMock starts ec2-metadata-mock on a loopback port, IMDSv2 only, with
// args (its spot subcommand and schedule), and returns its URL.
func startMock(t *testing.T, args ...string) string {
	t.Helper()
	bin := mockBinary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	home := t.TempDir() // it looks for a config file in $HOME
	cmd := exec.Command(bin, append(args, "--imdsv2", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port))...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.Dir = home
	log, err := os.Create(filepath.Join(home, "mock.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("ec2-metadata-mock log:\n%s", b)
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPut, url+tokenPath, nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ec2-metadata-mock did not answer on %s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSpotInterruptionFromMetadataMock(t *testing.T) {
	// A spot interruption 2s after the mock starts, a rebalance
	// recommendation after 1s.
	url := startMock(t, "spot", "--mock-delay-sec", "2", "--rebalance-delay-sec", "1")
	c := New(Options{Endpoint: url})
	w := NewWatcher(c, WatcherOptions{Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Before the schedule: no interruption (the rebalance may be out).
	before, err := w.Poll(ctx)
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	for _, n := range before {
		if n.Kind == agentapi.NoticeInterruption {
			t.Fatalf("interruption before it was scheduled: %+v", n)
		}
	}

	reports := make(chan []agentapi.Notice, 16)
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Watch(watchCtx, func(ns []agentapi.Notice) { reports <- ns }) }()
	var got []agentapi.Notice
	for len(got) < 2 {
		select {
		case got = <-reports:
		case <-ctx.Done():
			t.Fatalf("no interruption and rebalance notices; last report %+v", got)
		}
	}
	stop()
	<-done
	spot, rebalance := got[0], got[1]
	if spot.Kind != agentapi.NoticeInterruption || spot.Action != "terminate" || spot.Source != Source || spot.InstanceID == "" {
		t.Errorf("interruption notice = %+v", spot)
	}
	if lead := spot.Deadline.Sub(spot.IssuedAt); lead <= 0 || lead > 2*time.Minute+time.Second {
		t.Errorf("interruption notice %+v: lead %v, want up to EC2's two minutes", spot, lead)
	}
	if d := time.Until(spot.Deadline); d < time.Minute || d > 3*time.Minute {
		t.Errorf("interruption deadline %v is %v away; the mock says two minutes", spot.Deadline, d)
	}
	if rebalance.Kind != agentapi.NoticeRebalance || rebalance.IssuedAt.IsZero() || !rebalance.Deadline.IsZero() {
		t.Errorf("rebalance notice = %+v", rebalance)
	}

	// The mock moves its deadline with each request; ours stays put.
	time.Sleep(1100 * time.Millisecond)
	again, err := w.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || again[0] != spot {
		t.Errorf("second poll = %+v; want the first deadline kept, %+v", again, spot)
	}
	a, err := c.SpotAction(ctx)
	if err != nil || a == nil || !a.Time.After(spot.Deadline) {
		t.Errorf("the mock's own deadline %+v, %v; expected it to have moved past %v", a, err, spot.Deadline)
	}
}

func TestSessionTokenRenewedWhenRefused(t *testing.T) {
	url := startMock(t, "spot", "--mock-delay-sec", "0")
	c := New(Options{Endpoint: url})
	ctx := context.Background()
	// A token the service never issued, with a long life ahead: the first
	// read is refused (401), the client gets a new token and reads again.
	c.token, c.tokenExp = "not-a-token", time.Now().Add(time.Hour)
	id, err := c.InstanceID(ctx)
	if err != nil || id == "" {
		t.Fatalf("InstanceID with a refused token: %q, %v", id, err)
	}
	if c.token == "not-a-token" {
		t.Errorf("the refused token was kept")
	}
	// IMDSv2 only: a read without a token is refused, so the client's
	// success above came through a session.
	resp, err := http.Get(url + instanceIDPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without a token: %s; want 401 from an IMDSv2-only service", resp.Status)
	}
}

func TestNoMetadataService(t *testing.T) {
	// Nothing listens: Poll fails and reports nothing.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	w := NewWatcher(New(Options{Endpoint: url}), WatcherOptions{})
	got, err := w.Poll(context.Background())
	if err == nil || len(got) != 0 {
		t.Errorf("Poll without a service = %+v, %v; want an error and no notices", got, err)
	}
}
