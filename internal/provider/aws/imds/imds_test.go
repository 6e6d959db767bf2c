package imds

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// startMock starts AWS's ec2-metadata-mock on a loopback port with args
// (its spot subcommand and schedule) and returns its URL.
func startMock(t *testing.T, args ...string) string {
	t.Helper()
	return testutil.StartMetadataMock(t, testutil.MetadataMock{Args: args})
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
