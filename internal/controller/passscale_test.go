package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestPassTimeBoundedAsLiveGrows is the regression guard on the scaling
// of a scheduling pass (issue #15): 1,000 full nodes under 100,000 queued
// jobs (20,000 with -short) in 4 queues / 2 cohorts, through the real
// controller's pass (snapshot, budget holds, Schedule, commit of its
// preemptions). The same GPUs are held once by 1,000 eight-GPU attempts and
// once by 8,000 one-GPU attempts. balanced: every queue holds its nominal
// quota, so nothing may be preempted; reclaim: qa and qc borrow from qb
// and qd, whose jobs reclaim. A pass whose work grows with live attempts ×
// blocked jobs (preemption scanning every live attempt for every blocked
// job, as before the fix: 7.2× here with -short) takes several times as long
// with the larger live set; a bounded one about as long. The bound compares the two, not wall time against a
// number, so a slow or loaded machine does not fail it.
//
// Not parallel: it compares timings, so it runs while no other test does.
func TestPassTimeBoundedAsLiveGrows(t *testing.T) {
	pending := 100000
	if testing.Short() {
		pending = 20000
	}
	// The quadratic pass measured 7.2× (-short); a bounded one 1–2× quietly and
	// up to 4.6× at load 20–30 (other packages testing beside it in CI).
	const nodes, maxRatio = 1000, 5.5
	measure := func(owners []string, perAttempt int) (steady time.Duration, preempted int) {
		st := fullFleetStore(nodes, perAttempt, pending, owners)
		clk := clock.NewFake(t0)
		logs, err := logstore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clk, ServerURL: "http://127.0.0.1:7777",
			CheckpointDir: t.TempDir(), HeartbeatTimeout: time.Minute, PassGap: -1, Fatal: func(err error) { t.Errorf("fatal: %v", err) }})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		for i, q := range []string{"qa", "qb", "qc", "qd"} {
			spec := model.QueueSpec{Cohort: fmt.Sprintf("c%d", i/2), Weight: 1, Quota: map[string]model.GPUQuota{model.AnyGPU: {Nominal: float64(8*nodes) / 4}}}
			if _, _, err := c.PutQueue(ctx, q, spec); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.st.LiveCount(); got != 8*nodes/perAttempt {
			t.Fatalf("%d live attempts, want %d", got, 8*nodes/perAttempt)
		}
		// The first pass reclaims; the next ones find those attempts
		// releasing and search again (within the per-pass caps).
		for pass := 0; pass < 4; pass++ {
			clk.Advance(time.Second)
			c.mu.Lock()
			c.memo.forget() // a full pass each time: this measures the pass, not its skipping
			c.mu.Unlock()
			start := time.Now()
			if err := c.pass(ctx); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			c.mu.Lock()
			plan := c.lastPlan
			c.mu.Unlock()
			if plan == nil || len(plan.Bindings) != 0 || plan.Verdicts.Len() != pending {
				t.Fatalf("pass %d: want no bindings and %d verdicts, got %+v", pass, pending, plan)
			}
			if pass == 0 {
				preempted = len(plan.Preemptions)
				continue
			}
			if steady == 0 || took < steady {
				steady = took
			}
		}
		return steady, preempted
	}
	for _, tc := range []struct {
		name   string
		owners []string // who holds each eighth of the GPUs
	}{
		{"balanced", []string{"qa", "qa", "qb", "qb", "qc", "qc", "qd", "qd"}},
		{"reclaim", []string{"qa", "qa", "qa", "qb", "qc", "qc", "qc", "qd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			small, pSmall := measure(tc.owners, 8)
			large, pLarge := measure(tc.owners, 1)
			t.Logf("%d pending: steady pass %v with %d live attempts, %v with %d (%.2f×); first pass preempted %d and %d",
				pending, small, nodes, large, 8*nodes, float64(large)/float64(small), pSmall, pLarge)
			if reclaim := tc.owners[2] == "qa"; (pSmall > 0) != reclaim || (pLarge > 0) != reclaim {
				t.Errorf("first pass preempted %d and %d attempts; want some only when qa and qc borrow", pSmall, pLarge)
			}
			if r := float64(large) / float64(small); r > maxRatio {
				t.Errorf("a pass with 8× the live attempts took %.2f× as long (%v against %v), want ≤ %.1f×: pass work grows with live attempts × queued jobs",
					r, large, small, maxRatio)
			}
		})
	}
}

// fullFleetStore is a store holding nodes full nodes (8 H100, 64 CPUs,
// 512 GiB, a unique address label each), every GPU held by running
// attempts of perAttempt GPUs (and CPU and memory in proportion), the
// attempts' queues taken in turn from owners; and pending one-GPU, 8-CPU,
// 64 GiB jobs, a quarter per queue.
func fullFleetStore(nodes, perAttempt, pending int, owners []string) *memStore {
	st := newMemStore()
	seq := uint64(0)
	attempts := 0
	for i := 0; i < nodes; i++ {
		n := &model.Node{ID: fmt.Sprintf("n%05d", i), Name: fmt.Sprintf("n%05d", i), Provider: "static", Region: "r1", State: model.NodeReady,
			CPU: 64, Memory: 512 * model.GiB, CapacityType: model.Owned, PricePerHour: 30, Version: 1,
			Labels: map[string]string{"gpufleet.dev/address": fmt.Sprintf("10.0.%d.%d:7070", i>>8, i&255)}}
		for g := 0; g < 8; g++ {
			n.GPUs = append(n.GPUs, model.GPU{Index: g, Model: "H100", Memory: 80 * model.GiB})
		}
		st.nodes[n.ID] = n
		for g := 0; g < 8; g += perAttempt {
			seq++
			spec := model.JobSpec{Queue: owners[attempts%len(owners)], Replicas: 1, Run: model.RunSpec{Command: []string{"train"}},
				Resources: model.Resources{GPUs: float64(perAttempt), CPU: float64(8 * perAttempt), Memory: model.Bytes(perAttempt) * 64 * model.GiB}}
			spec.Default()
			attempts++
			j := &model.Job{ID: fmt.Sprintf("r%06d", seq), Seq: seq, Version: 2, Project: "default", State: model.JobRunning, Attempts: 1, Spec: spec, EnqueuedAt: t0}
			started := t0.Add(-time.Duration(seq%600) * time.Second)
			var gpus []int
			for k := g; k < g+perAttempt; k++ {
				gpus = append(gpus, k)
			}
			st.jobs[j.ID] = j
			a := &model.Attempt{ID: model.AttemptID(j.ID, 1), JobID: j.ID, Number: 1, State: model.AttemptRunning, CreatedAt: started, StartedAt: &started, Version: 2,
				Replicas: []model.Replica{{NodeID: n.ID, GPUs: gpus, State: model.AttemptRunning}}}
			st.attempts[a.ID] = a
		}
	}
	queues := []string{"qa", "qb", "qc", "qd"}
	for i := 0; i < pending; i++ {
		seq++
		spec := model.JobSpec{Queue: queues[i%4], Replicas: 1, Run: model.RunSpec{Command: []string{"train"}},
			Resources: model.Resources{GPUs: 1, CPU: 8, Memory: 64 * model.GiB}}
		spec.Default()
		st.jobs[fmt.Sprintf("j%06d", i)] = &model.Job{ID: fmt.Sprintf("j%06d", i), Seq: seq, Version: 1, Project: "default", State: model.JobQueued, Spec: spec, EnqueuedAt: t0}
	}
	return st
}
