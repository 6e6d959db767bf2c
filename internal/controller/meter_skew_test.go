package controller

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestSkewedAgentClockIsBilledTrueRuntime: a 1-GPU job runs 120 s on a
// node whose clock is 10 minutes behind the server's, or ahead of it. Its
// agent reports the start, sightings and end on its own clock, and says
// what its clock read when it sent each sync (SentAt); the job is billed
// its 120 s within a second either way, not what the clamps to the
// attempt's creation and the reports' arrival leave of skewed times.
func TestSkewedAgentClockIsBilledTrueRuntime(t *testing.T) {
	for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			st := newMemStore()
			c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
			jobID, rid := startMeteredJob(t, c)
			agent := func() time.Time { return clk.Now().Add(skew) } // the node's clock
			sync := func(s agentapi.ReplicaStatus) {
				t.Helper()
				sent := agent()
				if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", SentAt: &sent, Statuses: []agentapi.ReplicaStatus{s}}); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(time.Second)
			start := agent()
			clk.Advance(2 * time.Second) // noticed and reported a little later
			seen := agent()
			sync(agentapi.ReplicaStatus{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen})
			for range 23 { // 5 s apart, with cost passes between
				clk.Advance(5 * time.Second)
				seen := agent()
				sync(agentapi.ReplicaStatus{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen})
				if err := c.CostPass(ctx); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(3 * time.Second)
			end := agent() // 120 s after start
			clk.Advance(2 * time.Second)
			sync(exitedAt(rid, 0, "", start, end))
			clk.Advance(5 * time.Second)
			if err := c.CostPass(ctx); err != nil {
				t.Fatal(err)
			}
			if got := allocatedGPUSeconds(st, jobID); math.Abs(got-120) > 1 {
				t.Errorf("a 120 s job on a node %v off was billed %.0f GPU-seconds, want 120 ± 1", skew, got)
			}
		})
	}
}

// TestSlowSyncDoesNotMoveTimes: every sample of an agent's clock offset
// (arrival − SentAt) carries that sync's transit too, queueing on a
// loaded server included. The report of a start that sat 20 s in transit
// must not move the start 20 s later (billing 100 of 120 s): the offset
// is the least-transit sample (clockOffset), here the sync before it.
func TestSlowSyncDoesNotMoveTimes(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	skew := -3 * time.Minute
	agent := func() time.Time { return clk.Now().Add(skew) }
	sync := func(transit time.Duration, s ...agentapi.ReplicaStatus) {
		t.Helper()
		sent := agent().Add(-transit) // written that long before it arrives
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", SentAt: &sent, Statuses: s}); err != nil {
			t.Fatal(err)
		}
	}
	sync(0) // a prompt one: the offset is known
	clk.Advance(time.Second)
	start := agent()
	clk.Advance(22 * time.Second)
	seen := agent().Add(-20 * time.Second)
	sync(20*time.Second, agentapi.ReplicaStatus{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen})
	for range 19 {
		clk.Advance(5 * time.Second)
		seen := agent()
		sync(0, agentapi.ReplicaStatus{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen})
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(3 * time.Second)
	end := agent() // 120 s after start
	clk.Advance(2 * time.Second)
	sync(0, exitedAt(rid, 0, "", start, end))
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := allocatedGPUSeconds(st, jobID); math.Abs(got-120) > 1 {
		t.Errorf("a 120 s job whose start report was 20 s in transit was billed %.0f GPU-seconds, want 120 ± 1", got)
	}
}

func TestClockOffsetKeepsTheLeastTransit(t *testing.T) {
	var o clockOffset
	o = o.next(5*time.Second, t0)
	o = o.next(25*time.Second, t0.Add(time.Minute)) // slow: ignored
	if o.off != 5*time.Second {
		t.Fatalf("after a slow sample the offset is %v, want the prompt one's 5s", o.off)
	}
	o = o.next(4*time.Second, t0.Add(2*time.Minute))
	if o.off != 4*time.Second {
		t.Fatalf("a quicker sample gives %v, want 4s", o.off)
	}
	o = o.next(60*time.Second, t0.Add(2*time.Minute+offsetWindow+time.Second)) // the clock was stepped
	if o.off != 60*time.Second {
		t.Fatalf("past the window the offset is %v, want the new 60s", o.off)
	}
}

// allocatedGPUSeconds is the GPU-seconds the ledger charges job id.
func allocatedGPUSeconds(st *memStore, id string) float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var sum float64
	for _, e := range st.ledger {
		if e.Kind == model.LedgerAllocation && e.JobID == id {
			sum += e.GPUSeconds
		}
	}
	return sum
}

// TestStartAfterPassIsBilledFromStart: an agent that sends its clock waits
// in a long poll when its replica's process starts; a cost pass runs 5 s
// later, before the agent has reported it; the agent then cuts its poll
// short to report the start, with the time it started. The job runs 15 s
// and is billed 15, not the 10 left after a pass that metered the node
// idle up to its own time; and the node's ledger still adds up to its
// bill, every second once.
func TestStartAfterPassIsBilledFromStart(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	var gen uint64
	sync := func(ctx context.Context, wait time.Duration, s ...agentapi.ReplicaStatus) error {
		sent := clk.Now()
		resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Generation: gen, SentAt: &sent, Wait: model.Duration(wait), Statuses: s})
		if err == nil && wait == 0 {
			gen = resp.Generation
		}
		return err
	}
	if err := sync(ctx, 0); err != nil { // the agent has everything
		t.Fatal(err)
	}
	armed := clk.Waiters()
	pollCtx, cut := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() { polled <- sync(pollCtx, 30*time.Second) }()
	for clk.Waiters() == armed {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(time.Second)
	start := clk.Now() // the child starts
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	cut() // the agent noticed: it cuts its poll short and reports
	<-polled
	seen := clk.Now()
	if err := sync(ctx, 0, agentapi.ReplicaStatus{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	end := clk.Now()
	if err := sync(ctx, 0, exitedAt(rid, 0, "", start, end)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	checkMeteredOnce(t, st, jobID, start, end)
	// The node's rows (allocations and idle) add up to its price over the
	// metered time: nothing billed twice to make up the job's share.
	c.mu.Lock()
	to := c.cost.meteredTo
	c.mu.Unlock()
	st.mu.Lock()
	var sum model.Money
	from := to
	for _, e := range st.ledger {
		if e.NodeID == "n1" {
			sum += e.Cost
			from = minTime(from, e.From)
		}
	}
	st.mu.Unlock()
	if want := model.FromDollars(2 * to.Sub(from).Seconds()); sum != want {
		t.Errorf("n1's ledger adds up to %s over [%s, %s), want its bill %s", sum.USD(), from.Format(time.TimeOnly), to.Format(time.TimeOnly), want.USD())
	}
}
