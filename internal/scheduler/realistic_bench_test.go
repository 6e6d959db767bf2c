package scheduler

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// The realistic benchmarks (issue #15, item 6) time what a controller pass
// costs on a fleet as agents register it: every node carries its own
// address label (so no two nodes are alike by their labels), jobs ask for
// CPU and memory as well as a GPU, quotas bind, and the timer covers the
// snapshot, the pass and the apply of its bindings and preemptions into
// the in-memory state, as the controller's pass does (minus the store).

// realNode is an agent-registered node: 8 H100, 64 CPUs, 512 GiB and the
// unique address label every static agent reports.
func realNode(i int) *model.Node {
	n := benchNode(fmt.Sprintf("n%06d", i), "H100", 8, 80*model.GiB, 30)
	n.Labels = map[string]string{"gpufleet.dev/address": fmt.Sprintf("10.%d.%d.%d:7070", i>>16, (i>>8)&255, i&255)}
	return n
}

// realJob asks for 1 GPU, 8 CPUs and 64 GiB: eight fill a node on every
// axis.
func realJob(id string, seq uint64, queue string) *model.Job {
	j := job(id, seq, 1, cpu(8), memory(64*model.GiB))
	j.Spec.Queue = queue
	return j
}

var realQueues = []string{"qa", "qb", "qc", "qd"}

// cohortQueues declares qa, qb in cohort c0 and qc, qd in c1, each with
// nominal GPUs of any model.
func cohortQueues(nominal float64) []*model.Queue {
	var qs []*model.Queue
	for i, name := range realQueues {
		qs = append(qs, &model.Queue{Name: name, Spec: model.QueueSpec{Cohort: fmt.Sprintf("c%d", i/2), Weight: 1,
			Quota: map[string]model.GPUQuota{model.AnyGPU: {Nominal: nominal}}}})
	}
	return qs
}

// applyPlan commits a plan into st as the controller's pass does in
// memory (bindLocked, preemptLocked): a binding whose job is still at its
// version and whose GPUs are free becomes a starting attempt; a
// preemption marks its victim stopping. It returns the bindings applied.
func applyPlan(st *state.State, plan Plan, at time.Time) int {
	bound := 0
bindings:
	for _, bnd := range plan.Bindings {
		j, ok := st.Job(bnd.JobID)
		if !ok || j.Version != bnd.JobVersion || j.State != model.JobQueued {
			continue
		}
		for _, p := range bnd.Replicas {
			for _, g := range p.GPUs {
				if st.GPUHolder(p.NodeID, g) != "" {
					continue bindings
				}
			}
		}
		j = j.Clone()
		j.Attempts++
		j.State = model.JobAdmitted
		j.Version++
		a := &model.Attempt{ID: model.AttemptID(j.ID, j.Attempts), JobID: j.ID, Number: j.Attempts, State: model.AttemptStarting, CreatedAt: at, Version: 1}
		for _, p := range bnd.Replicas {
			a.Replicas = append(a.Replicas, model.Replica{Rank: p.Rank, NodeID: p.NodeID, GPUs: append([]int(nil), p.GPUs...), GPUShare: p.Share, State: model.AttemptStarting})
		}
		st.PutJob(j)
		st.PutAttempt(a)
		bound++
	}
	for _, pe := range plan.Preemptions {
		a, ok := st.Attempt(pe.AttemptID)
		if !ok || a.State.Terminal() || a.Stop {
			continue
		}
		a = a.Clone()
		a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, pe.Reason
		a.Version++
		st.PutAttempt(a)
	}
	return bound
}

// checkQuota fails b when a queue holds more than its cohort can lend it
// or a cohort more than its members' nominal quota, counting what is live
// in st after the apply.
func checkQuota(b *testing.B, st *state.State, nominal float64) {
	b.Helper()
	cohort := map[int]float64{}
	for i, q := range realQueues {
		use := st.QueueUse(q)["H100"]
		if use > 2*nominal+eps {
			b.Fatalf("queue %s holds %g GPUs, its cohort lends it at most %g", q, use, 2*nominal)
		}
		cohort[i/2] += use
	}
	for c, use := range cohort {
		if use > 2*nominal+eps {
			b.Fatalf("cohort c%d holds %g GPUs, quota %g", c, use, 2*nominal)
		}
	}
}

// timedPasses runs b.N passes, each on a fresh state from build (outside
// the timer), timing snapshot + Schedule + apply. It returns the last
// pass's state and plan, the bindings applied, and the bytes allocated
// per pass inside the timer.
func timedPasses(b *testing.B, build func() *state.State) (*state.State, Plan, int, float64) {
	b.Helper()
	var (
		st       *state.State
		plan     Plan
		bound    int
		alloc    uint64
		cpuTime  time.Duration
		ms0, ms1 runtime.MemStats
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		st = build()
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		c0 := processCPU()
		b.StartTimer()
		snap := st.Snapshot()
		plan = Schedule(snap, nil, now, 1)
		bound = applyPlan(st, plan, now)
		b.StopTimer()
		cpuTime += processCPU() - c0
		runtime.ReadMemStats(&ms1)
		alloc += ms1.TotalAlloc - ms0.TotalAlloc
	}
	// CPU time (the process's, garbage collection included) is what a
	// shared machine's load does not inflate; wall time is the headline.
	b.ReportMetric(cpuTime.Seconds()*1e3/float64(b.N), "cpu-ms/pass")
	return st, plan, bound, float64(alloc) / float64(b.N)
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRealistic: N agent-registered nodes (unique address label,
// 8 GPU / 64 CPU / 512 GiB), 4N asks of 1 GPU / 8 CPU / 64 GiB spread
// over qa–qd (the shape YuniKorn's core was measured on in issue #15),
// two cohorts, each queue's nominal quota a tenth of the GPUs, so each
// cohort places 1.6N asks and the quota refuses the rest. The last case
// is 10,000 nodes under 100,000 pending asks.
func BenchmarkRealistic(b *testing.B) {
	for _, tc := range []struct{ nodes, pending int }{{1000, 4000}, {10000, 40000}, {10000, 100000}} {
		n, pending := tc.nodes, tc.pending
		name := fmt.Sprintf("nodes=%d", n)
		if pending != 4*n {
			name += fmt.Sprintf("/pending=%d", pending)
		}
		if *benchNodes > 0 {
			n, pending = *benchNodes, 4**benchNodes
		}
		b.Run(name, func(b *testing.B) {
			nominal := float64(8*n) / 10
			nodes := make([]*model.Node, n)
			for i := range nodes {
				nodes[i] = realNode(i)
			}
			build := func() *state.State {
				st := state.New()
				for _, q := range cohortQueues(nominal) {
					st.PutQueue(q)
				}
				for _, nd := range nodes {
					st.PutNode(nd)
				}
				for i := 0; i < pending; i++ {
					st.PutJob(realJob(fmt.Sprintf("j%07d", i), uint64(i+1), realQueues[i%4]))
				}
				return st
			}
			b.Logf("%d nodes (unique address label) × 8 H100 / 64 CPU / 512 GiB, %d asks of 1 GPU / 8 CPU / 64 GiB, 4 queues / 2 cohorts at %g GPUs nominal each", n, pending, nominal)
			st, plan, bound, alloc := timedPasses(b, build)
			want := int(4 * nominal)
			if len(plan.Bindings) != want || bound != want {
				b.Fatalf("planned %d and applied %d bindings, want %d (the cohorts' quota)", len(plan.Bindings), bound, want)
			}
			checkQuota(b, st, nominal)
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(bound)/sec, "placements/s")
			b.ReportMetric(sec*1e3, "ms/pass")
			b.ReportMetric(alloc/(1<<20), "MB-alloc/pass")
		})
		if *benchNodes > 0 {
			break
		}
	}
}

// fullFleet builds nodes nodes, every GPU, CPU and byte held by one-GPU
// attempts, and pending queued jobs, all realistic, a quarter in each
// queue. share[i] is the part of its nominal quota queue i's live
// attempts hold: {1.5, 0.5, 1.5, 0.5} has qa and qc borrow what qb and qd
// lend, so the latter's jobs may reclaim.
func fullFleet(nodes, pending int, nominal float64, share []float64) *state.State {
	st := state.New()
	for _, q := range cohortQueues(nominal) {
		st.PutQueue(q)
	}
	var owner []string
	for qi, q := range realQueues {
		for k := 0; k < int(share[qi]*nominal); k++ {
			owner = append(owner, q)
		}
	}
	seq := uint64(0)
	for i := 0; i < nodes; i++ {
		nd := realNode(i)
		st.PutNode(nd)
		for g := 0; g < 8; g++ {
			seq++
			r := realJob(fmt.Sprintf("r%07d", seq), seq, owner[(i*8+g)%len(owner)])
			r.State, r.Attempts = model.JobRunning, 1
			st.PutJob(r)
			started := now.Add(-time.Duration(seq%600) * time.Second)
			st.PutAttempt(&model.Attempt{ID: model.AttemptID(r.ID, 1), JobID: r.ID, Number: 1, State: model.AttemptRunning, CreatedAt: started, StartedAt: &started, Version: 1,
				Replicas: []model.Replica{{NodeID: nd.ID, GPUs: []int{g}, State: model.AttemptRunning}}})
		}
	}
	for i := 0; i < pending; i++ {
		seq++
		st.PutJob(realJob(fmt.Sprintf("j%07d", i), seq, realQueues[i%4]))
	}
	return st
}

// BenchmarkFullFleetDeepQueue: 1,000 full realistic nodes (8,000 running
// one-GPU attempts), 100,000 queued realistic jobs in 4 queues / 2
// cohorts. Nothing fits, so the pass is every job's verdict plus the
// preemption search. balanced: every queue runs its nominal quota, so
// nothing may be preempted; reclaim: qa and qc borrow from qb and qd,
// whose jobs reclaim (at most maxPreemptors attempts per pass).
func BenchmarkFullFleetDeepQueue(b *testing.B) {
	nodes, pending := nodesN(1000), 100000
	if testing.Short() {
		pending = 10000
	}
	nominal := float64(8*nodes) / 4
	for _, tc := range []struct {
		name  string
		share []float64
	}{{"balanced", []float64{1, 1, 1, 1}}, {"reclaim", []float64{1.5, 0.5, 1.5, 0.5}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.Logf("%d full nodes (unique address label, 8 one-GPU attempts each), %d queued asks of 1 GPU / 8 CPU / 64 GiB, 4 queues / 2 cohorts at %g nominal, live use %v of nominal",
				nodes, pending, nominal, tc.share)
			st, plan, bound, alloc := timedPasses(b, func() *state.State { return fullFleet(nodes, pending, nominal, tc.share) })
			if bound != 0 || plan.Verdicts.Len() != pending {
				b.Fatalf("bound %d, %d verdicts; want 0 and %d", bound, plan.Verdicts.Len(), pending)
			}
			reclaim := tc.share[0] > 1
			if (len(plan.Preemptions) > 0) != reclaim || len(plan.Preemptions) > maxPreemptors {
				b.Fatalf("%d preemptions, want %s", len(plan.Preemptions), map[bool]string{true: fmt.Sprintf("1..%d (qb and qd reclaim)", maxPreemptors), false: "none"}[reclaim])
			}
			for _, pe := range plan.Preemptions {
				a, _ := st.Attempt(pe.AttemptID)
				j, _ := st.Job(a.JobID)
				if q := j.Spec.Queue; q != "qa" && q != "qc" {
					b.Fatalf("preempted %s of queue %s, which does not borrow", pe.AttemptID, q)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(sec*1e3, "ms/pass")
			b.ReportMetric(alloc/(1<<20), "MB-alloc/pass")
			b.ReportMetric(float64(len(plan.Preemptions)), "preemptions")
		})
	}
}
