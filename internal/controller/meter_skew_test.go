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
