package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
)

// newTermController builds a controller on st as a new leader (or a
// restarted server) would: from what st holds, metering driven by the
// test.
func newTermController(t *testing.T, st *memStore, clk *clock.Fake, prices cost.PriceTable, lag time.Duration) *Controller {
	t.Helper()
	logs, err := logstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{
		Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Minute, PassGap: -1,
		Cost:   CostConfig{Prices: prices, MeterInterval: -1, ReportLag: lag},
		Alerts: AlertRules{QueueWaitP95: -1},
		Fatal:  func(err error) { t.Errorf("fatal: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestTakeoverMetersEachSecondOnce: a 1-GPU attempt runs 20 s on its
// agent's clock across a leader change. The old leader heard of its start
// 3 s late and metered it up to its last pass; the new leader takes over
// 8 s after the replica ended and meters at once (its loop's first pass),
// before the agent has found it; the agent's report of the end arrives
// 2 s later still. The ledger charges the attempt its 20 s once: no
// second of it in two entries, none before its start or after its end,
// whatever the leaders saw late.
func TestTakeoverMetersEachSecondOnce(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	prices := perGPUSecond(t)
	old := newTermController(t, st, clk, prices, 0)
	jobID, rid := startMeteredJob(t, old)
	clk.Advance(2 * time.Second)
	start := clk.Now() // the replica starts on the agent
	clk.Advance(3 * time.Second)
	if _, err := old.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the old leader meters while the replica runs
		clk.Advance(5 * time.Second)
		if err := old.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	old.Close() // killed: nothing more from it
	clk.Advance(7 * time.Second)
	end := start.Add(20 * time.Second) // the replica ends while no one leads
	clk.Advance(end.Sub(clk.Now()) + 8*time.Second)

	c := newTermController(t, st, clk, prices, 0)
	if err := c.CostPass(ctx); err != nil { // the new term's first pass, before the agent syncs
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{exitedAt(rid, 0, "", start, end)}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clk.Advance(5 * time.Second)
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := c.Job(jobID); got.State != model.JobSucceeded {
		t.Fatalf("job %s, want succeeded", got.State)
	}

	checkMeteredOnce(t, st, jobID, start, end)
}

// checkMeteredOnce checks that st's ledger charges job id, 1 GPU at $1 a
// GPU-second, for [start, end) and nothing else: no second twice.
func checkMeteredOnce(t *testing.T, st *memStore, id string, start, end time.Time) {
	t.Helper()
	st.mu.Lock()
	ledger := append([]model.LedgerEntry(nil), st.ledger...)
	st.mu.Unlock()
	var (
		gpuSec float64
		spent  model.Money
		seen   = map[int64]bool{}
	)
	for _, e := range ledger {
		if e.Kind != model.LedgerAllocation || e.JobID != id {
			continue
		}
		gpuSec += e.GPUSeconds
		spent += e.Cost
		if e.From.Before(start) || e.To.After(end) {
			t.Errorf("entry [%s, %s) outside the replica's run [%s, %s)", e.From.Format(time.TimeOnly), e.To.Format(time.TimeOnly), start.Format(time.TimeOnly), end.Format(time.TimeOnly))
		}
		for s := e.From.Unix(); s < e.To.Unix(); s++ {
			if seen[s] {
				t.Errorf("second %s metered twice", time.Unix(s, 0).UTC().Format(time.TimeOnly))
			}
			seen[s] = true
		}
	}
	want := end.Sub(start).Seconds()
	if gpuSec != want || spent != model.FromDollars(want) {
		t.Errorf("the attempt was metered %.0f GPU-seconds for %s, want 1 GPU × %.0f s = $%.2f", gpuSec, spent.USD(), want, want)
	}
}

// perGPUSecond prices node n1 at $7,200 an hour: $1 a GPU-second on its
// two GPUs.
func perGPUSecond(t *testing.T) cost.PriceTable {
	t.Helper()
	prices, err := cost.ParsePrices(strings.NewReader("match,value,price_per_hour\nnode,n1,7200\n"))
	if err != nil {
		t.Fatal(err)
	}
	return prices
}

// startMeteredJob registers n1 (two GPUs), starts the meter's clock, and
// submits and places a 1-GPU job there; it returns the job's id and its
// replica's, handed to n1's agent by a sync and not yet started.
func startMeteredJob(t *testing.T, c *Controller) (jobID, replicaID string) {
	t.Helper()
	ctx := context.Background()
	reg := agentapi.Registration{NodeID: "n1", Name: "n1", Provider: "static", CPU: 16, Memory: 64 * model.GiB}
	for i := range 2 {
		reg.GPUs = append(reg.GPUs, model.GPU{Index: i, UUID: "n1-gpu" + string(rune('a'+i)), Model: "H100", Memory: 80 * model.GiB})
	}
	if _, err := c.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if err := c.CostPass(ctx); err != nil { // starts the meter's clock
		t.Fatal(err)
	}
	spec := cmdSpec(1)
	spec.Default()
	j, _, err := c.Submit(ctx, Submission{Project: "default", User: "test", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1"})
	if err != nil || len(resp.Replicas) != 1 {
		t.Fatalf("desired set %+v, %v", resp, err)
	}
	return j.ID, resp.Replicas[0].ID
}

// TestLateEndReportIsNotBilled: a replica ends, and its agent's report
// reaches the server (busy, or the agent finding a leader) 12 s later,
// after two cost passes. With a report lag the meter waits for the node
// to confirm its replicas, so the job is billed up to its end, not up to
// the passes that came before the report.
func TestLateEndReportIsNotBilled(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	clk.Advance(time.Second)
	start := clk.Now()
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start}}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(5 * time.Second)
		// The agent confirms its replica runs.
		if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start}}}); err != nil {
			t.Fatal(err)
		}
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(3 * time.Second)
	end := clk.Now() // the replica ends; its report is slow to arrive
	for range 2 {
		clk.Advance(5 * time.Second)
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{exitedAt(rid, 0, "", start, end)}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	checkMeteredOnce(t, st, jobID, start, end)
}

// TestStaleObservationIsNotBilled: a replica's agent saw it alive last at
// seen; it ended a second later, and the agent, slow to notice (a loaded
// machine, a log shipment stuck), goes on reporting it running for 20 s:
// in plain syncs, then waiting in a long poll, with the cost passes
// running meanwhile. Its syncs vouch only for what it saw, so the job is
// billed up to its end, never up to the syncs that still said "running".
func TestStaleObservationIsNotBilled(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	st := newMemStore()
	c := newTermController(t, st, clk, perGPUSecond(t), time.Minute)
	jobID, rid := startMeteredJob(t, c)
	clk.Advance(time.Second)
	start := clk.Now()
	running := func(seen time.Time, wait time.Duration, gen uint64) agentapi.SyncRequest {
		return agentapi.SyncRequest{NodeID: "n1", Generation: gen, Wait: model.Duration(wait), Statuses: []agentapi.ReplicaStatus{
			{ID: rid, Phase: agentapi.PhaseRunning, StartedAt: start, ObservedAt: &seen}}}
	}
	var gen uint64
	for range 3 { // seen alive at every sync
		clk.Advance(5 * time.Second)
		resp, err := c.Sync(ctx, running(clk.Now(), 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		gen = resp.Generation
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seen := clk.Now()
	clk.Advance(time.Second)
	end := clk.Now() // unnoticed by the agent
	for range 2 {
		clk.Advance(5 * time.Second)
		if _, err := c.Sync(ctx, running(seen, 0, 0)); err != nil {
			t.Fatal(err)
		}
		if err := c.CostPass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Now it waits in a long poll, still with nothing newer to tell.
	clk.Advance(time.Second)
	armed := clk.Waiters()
	polled := make(chan error, 1)
	go func() {
		_, err := c.Sync(ctx, running(seen, 10*time.Second, gen))
		polled <- err
	}()
	for clk.Waiters() == armed {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if _, err := c.Sync(ctx, agentapi.SyncRequest{NodeID: "n1", Statuses: []agentapi.ReplicaStatus{exitedAt(rid, 0, "", start, end)}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if err := c.CostPass(ctx); err != nil {
		t.Fatal(err)
	}
	checkMeteredOnce(t, st, jobID, start, end)
}
