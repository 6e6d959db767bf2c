package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
)

// A server that takes over (a new leader, or a restart) heard no node
// before, and building it can take long on a loaded machine: every node
// gets its full heartbeat timeout from when the controller's loops begin,
// not from when the state was loaded, and is lost only when silent for
// that long after.
func TestTakeoverGivesNodesAFullTimeout(t *testing.T) {
	clk := clock.NewFake(t0)
	st := newMemStore()
	h := newHarness(t, st, clk)
	node := h.register("", 1)
	j := h.submit(cmdSpec(1))
	rs := h.waitDesired(1).Replicas[0]
	h.sync(running(rs.ID))
	h.waitJob(j.ID, model.JobRunning)
	h.stop() // the old leader is gone

	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{
		Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Minute, PassGap: -1,
		Fatal: func(err error) { t.Errorf("fatal: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// The takeover's setup takes 50 s before the loops begin.
	clk.Advance(50 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	began := clk.Now()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		seen := c.lastSeen[node]
		c.mu.Unlock()
		if !seen.Before(began) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's heartbeat clock starts at %s, want when the loops began (%s)", seen, began)
		}
		time.Sleep(5 * time.Millisecond) // polling Run's start; bounded
	}

	// 70 s after the state was loaded, 20 s after the loops began.
	clk.Advance(20 * time.Second)
	c.checkNodes(ctx)
	c.mu.Lock()
	n, _ := c.st.Node(node)
	c.mu.Unlock()
	if n.State != model.NodeReady {
		t.Fatalf("node %s is %s 20 s into the new term, want ready", node, n.State)
	}
	if got, _ := c.Job(j.ID); got.State != model.JobRunning {
		t.Fatalf("job is %s 20 s into the new term, want running", got.State)
	}
	// Silent for the whole timeout of the new term: lost.
	clk.Advance(45 * time.Second)
	c.checkNodes(ctx)
	c.mu.Lock()
	n, _ = c.st.Node(node)
	c.mu.Unlock()
	if n.State != model.NodeLost {
		t.Fatalf("node %s is %s after 65 s of silence in the new term, want lost", node, n.State)
	}
}
