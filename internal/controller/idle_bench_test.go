package controller

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
)

// BenchmarkIdleDeepQueue is the CPU an idle controller uses (issue #15):
// 100,000 queued jobs in 4 queues / 2 cohorts, with no nodes, or under
// 1,000 full nodes (8,000 running one-GPU attempts, every queue at its
// nominal quota), the real Run loop on the real clock (1 s ticks: passes,
// node checks, scale, alerts, checkpoint markers, cost). Nothing changes
// once the first pass has judged the queue, so each iteration is one
// second of wall time and the benchmark reports the process's CPU (user +
// system, GC included) as a share of one core, and how many passes ran
// the scheduler per second.
func BenchmarkIdleDeepQueue(b *testing.B) {
	for _, nodes := range []int{0, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchIdle(b, nodes) })
	}
}

func benchIdle(b *testing.B, nodes int) {
	const pending = 100000
	st := fullFleetStore(nodes, 1, pending, []string{"qa", "qb", "qc", "qd"})
	logs, err := logstore.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(context.Background(), Config{Store: st, Logs: logs, Clock: clock.Real{}, ServerURL: "http://127.0.0.1:7777",
		CheckpointDir: b.TempDir(), HeartbeatTimeout: time.Hour, Fatal: func(err error) { b.Errorf("fatal: %v", err) }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	for i, q := range []string{"qa", "qb", "qc", "qd"} {
		spec := model.QueueSpec{Cohort: fmt.Sprintf("c%d", i/2), Weight: 1, Quota: map[string]model.GPUQuota{model.AnyGPU: {Nominal: float64(8*nodes) / 4}}}
		if _, _, err := c.PutQueue(ctx, q, spec); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// Wait for the first pass to judge the queue, then a few seconds more
	// for whatever follows it (its own commit, the first cost pass).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		c.mu.Lock()
		judged := c.lastPlan != nil && c.verdicts.Len() == pending
		c.mu.Unlock()
		if judged {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the first pass did not judge the queue within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	before, cpu0, wall0 := c.schedules(), cpuTime(b), time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%cpu")
	b.ReportMetric(float64(c.schedules()-before)/wall.Seconds(), "schedules/s")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
