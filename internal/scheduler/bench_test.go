package scheduler

import (
	"flag"
	"fmt"
	"math/bits"
	"math/rand"
	"runtime"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

var benchNodes = flag.Int("bench.nodes", 0, "override the node count of the scheduler benchmarks")

// phillyMix is the GPUs-per-job mix of the Philly trace (Microsoft,
// 2017; ../shared/data/traces/philly_sia.csv, 82,247 jobs), restricted to
// the sizes 1, 2, 4, 8, 16, 32 (82,224 jobs); counts, not read at run time.
var phillyMix = []struct{ gpus, count int }{{1, 76627}, {2, 1818}, {4, 1870}, {8, 1643}, {16, 199}, {32, 67}}

func benchNode(id string, gpuModel string, gpus int, mem model.Bytes, price float64) *model.Node {
	n := &model.Node{ID: id, Provider: "static", Region: "r1", State: model.NodeReady, CPU: 64, Memory: 512 * model.GiB, CapacityType: model.Owned, PricePerHour: price}
	for i := 0; i < gpus; i++ {
		n.GPUs = append(n.GPUs, model.GPU{Index: i, Model: gpuModel, Memory: mem, NVLinkGroup: 0})
	}
	return n
}

func fourQueues(totalGPUs int) []*model.Queue {
	var qs []*model.Queue
	for i, name := range []string{"qa", "qb", "qc", "qd"} {
		qs = append(qs, &model.Queue{Name: name, Spec: model.QueueSpec{Cohort: fmt.Sprintf("c%d", i/2), Weight: 1,
			Quota: map[string]model.GPUQuota{model.AnyGPU: {Nominal: float64(totalGPUs) / 4}}}})
	}
	return qs
}

func buildSnap(nodes []*model.Node, jobs []*model.Job, queues []*model.Queue) *state.Snapshot {
	st := state.New()
	for _, q := range queues {
		st.PutQueue(q)
	}
	for _, n := range nodes {
		st.PutNode(n)
	}
	for _, j := range jobs {
		st.PutJob(j)
	}
	return st.Snapshot()
}

// fragmented counts free GPUs on partly used nodes after the plan: GPUs a
// whole-node job can no longer use.
func fragmented(snap *state.Snapshot, plan Plan) (frag, free int) {
	used := map[string]int{}
	for _, b := range plan.Bindings {
		for _, r := range b.Replicas {
			used[r.NodeID] += len(r.GPUs)
		}
	}
	for _, v := range snap.Nodes {
		f := bits.OnesCount64(v.FreeMask) - used[v.Node.ID]
		free += f
		if f > 0 && f < len(v.Node.GPUs) {
			frag += f
		}
	}
	return frag, free
}

func checkPlan(b *testing.B, snap *state.Snapshot, plan Plan, wantPlaced int) {
	b.Helper()
	if wantPlaced >= 0 && len(plan.Bindings) != wantPlaced {
		b.Fatalf("placed %d jobs, want %d", len(plan.Bindings), wantPlaced)
	}
	jobs := map[string]*model.Job{}
	for _, j := range snap.Pending {
		jobs[j.ID] = j
	}
	seen := map[string]bool{}
	use := map[string]float64{}
	for _, bd := range plan.Bindings {
		j := jobs[bd.JobID]
		if len(bd.Replicas) != j.Spec.Replicas {
			b.Fatalf("gang %s split: %d of %d replicas", j.ID, len(bd.Replicas), j.Spec.Replicas)
		}
		for _, r := range bd.Replicas {
			for _, g := range r.GPUs {
				k := fmt.Sprintf("%s/%d", r.NodeID, g)
				if seen[k] {
					b.Fatalf("GPU %s bound twice", k)
				}
				seen[k] = true
			}
			use[j.Spec.Queue] += float64(len(r.GPUs))
		}
	}
	for _, q := range snap.Queues {
		nominal := q.Spec.Quota[model.AnyGPU].Nominal
		if use[q.Name] > 2*nominal+eps { // cohort of two: at most both members' quota
			b.Fatalf("queue %s uses %g GPUs, cohort allows at most %g", q.Name, use[q.Name], 2*nominal)
		}
	}
}

func runBench(b *testing.B, name string, snap *state.Snapshot, wantPlaced int, shape string) {
	b.Helper()
	b.Logf("%s: %s", name, shape)
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var plan Plan
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		plan = Schedule(snap, nil, now, 1)
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	checkPlan(b, snap, plan, wantPlaced)
	frag, free := fragmented(snap, plan)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(len(plan.Bindings))/sec, "placements/s")
	b.ReportMetric(float64(frag), "fragmented-GPUs")
	b.ReportMetric(float64(free), "free-GPUs")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/(1<<20), "MB-alloc/pass")
	b.ReportMetric(sec*1e3, "ms/pass")
}

func nodesN(def int) int {
	if *benchNodes > 0 {
		return *benchNodes
	}
	return def
}

// BenchmarkSingle: N nodes × 8 GPUs, 4N one-GPU jobs, four queues in two
// cohorts each with 25% of the GPUs nominal.
func BenchmarkSingle(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		n := n
		if *benchNodes > 0 {
			n = *benchNodes
		}
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			var nodes []*model.Node
			for i := 0; i < n; i++ {
				nodes = append(nodes, benchNode(fmt.Sprintf("n%06d", i), "H100", 8, 80*model.GiB, 30))
			}
			var jobs []*model.Job
			qnames := []string{"qa", "qb", "qc", "qd"}
			for i := 0; i < 4*n; i++ {
				j := job(fmt.Sprintf("j%07d", i), uint64(i+1), 1)
				j.Spec.Queue = qnames[i%4]
				jobs = append(jobs, j)
			}
			snap := buildSnap(nodes, jobs, fourQueues(8*n))
			runBench(b, "single", snap, 4*n, fmt.Sprintf("%d nodes × 8 H100, %d one-GPU jobs, 4 queues / 2 cohorts at 25%% nominal", n, 4*n))
		})
	}
}

// BenchmarkGang: 1,000 nodes × 8 GPUs, 1,000 gangs of 4 × 1 GPU; and
// whole-node gangs (4 × 8 GPUs) on 5,000 nodes.
func BenchmarkGang(b *testing.B) {
	for _, tc := range []struct {
		nodes, gangs, per int
	}{{1000, 1000, 1}, {5000, 1250, 8}} {
		n := nodesN(tc.nodes)
		b.Run(fmt.Sprintf("nodes=%d/4x%d", n, tc.per), func(b *testing.B) {
			var nodes []*model.Node
			for i := 0; i < n; i++ {
				nodes = append(nodes, benchNode(fmt.Sprintf("n%06d", i), "H100", 8, 80*model.GiB, 30))
			}
			var jobs []*model.Job
			for i := 0; i < tc.gangs; i++ {
				jobs = append(jobs, job(fmt.Sprintf("g%06d", i), uint64(i+1), float64(tc.per), replicas(4)))
			}
			snap := buildSnap(nodes, jobs, nil)
			want := min(tc.gangs, n*8/(4*tc.per))
			runBench(b, "gang", snap, want, fmt.Sprintf("%d nodes × 8 H100, %d gangs of 4 × %d GPUs", n, tc.gangs, tc.per))
		})
	}
}

// BenchmarkMixed: nodes from real catalog shapes (1, 2, 4, 8 GPUs of
// several models) and jobs with model and memory constraints.
func BenchmarkMixed(b *testing.B) {
	n := nodesN(2000)
	shapes := []struct {
		model string
		gpus  int
		mem   model.Bytes
		price float64
	}{{"H100", 8, 80 * model.GiB, 98.3}, {"A100-80GB", 8, 80 * model.GiB, 40.9}, {"A100", 8, 40 * model.GiB, 32.8}, {"L4", 1, 24 * model.GiB, 0.8},
		{"L4", 4, 24 * model.GiB, 4.4}, {"A10G", 1, 24 * model.GiB, 1.0}, {"A10G", 4, 24 * model.GiB, 5.7}, {"T4", 2, 16 * model.GiB, 1.2}, {"L40S", 4, 48 * model.GiB, 7.3}}
	rng := rand.New(rand.NewSource(1))
	var nodes []*model.Node
	gpus := 0
	for i := 0; i < n; i++ {
		sh := shapes[rng.Intn(len(shapes))]
		nodes = append(nodes, benchNode(fmt.Sprintf("n%06d", i), sh.model, sh.gpus, sh.mem, sh.price))
		gpus += sh.gpus
	}
	var jobs []*model.Job
	for i := 0; i < 2*n; i++ {
		var opts []jobOpt
		switch rng.Intn(4) {
		case 0:
			opts = append(opts, models("H100", "A100-80GB"))
		case 1:
			opts = append(opts, minMem(40*model.GiB))
		case 2:
			opts = append(opts, models("L4", "A10G", "T4"))
		}
		jobs = append(jobs, job(fmt.Sprintf("j%07d", i), uint64(i+1), float64([]int{1, 1, 1, 2, 4}[rng.Intn(5)]), opts...))
	}
	snap := buildSnap(nodes, jobs, nil)
	runBench(b, "mixed", snap, -1, fmt.Sprintf("%d nodes (%d GPUs) of %d catalog shapes, %d jobs with model/memory constraints", n, gpus, len(shapes), len(jobs)))
}

// BenchmarkBigPass: 10,000 nodes × 8 GPUs, 100,000 pending jobs with the
// Philly GPU-count mix, four queues.
func BenchmarkBigPass(b *testing.B) {
	n := nodesN(10000)
	var nodes []*model.Node
	for i := 0; i < n; i++ {
		nodes = append(nodes, benchNode(fmt.Sprintf("n%06d", i), "H100", 8, 80*model.GiB, 30))
	}
	total := 0
	for _, m := range phillyMix {
		total += m.count
	}
	rng := rand.New(rand.NewSource(2))
	qnames := []string{"qa", "qb", "qc", "qd"}
	var jobs []*model.Job
	for i := 0; i < 10*n; i++ {
		r := rng.Intn(total)
		g := 1
		for _, m := range phillyMix {
			if r < m.count {
				g = m.gpus
				break
			}
			r -= m.count
		}
		var j *model.Job
		if g > 8 {
			j = job(fmt.Sprintf("j%07d", i), uint64(i+1), 8, replicas(g/8))
		} else {
			j = job(fmt.Sprintf("j%07d", i), uint64(i+1), float64(g))
		}
		j.Spec.Queue = qnames[i%4]
		jobs = append(jobs, j)
	}
	snap := buildSnap(nodes, jobs, fourQueues(8*n))
	runBench(b, "big", snap, -1, fmt.Sprintf("%d nodes × 8 H100, %d jobs with the Philly mix (1,2,4,8,16,32 GPUs), 4 queues / 2 cohorts", n, len(jobs)))
}

// BenchmarkArrival: one new job on a busy cluster (every node 7/8 used).
func BenchmarkArrival(b *testing.B) {
	n := nodesN(10000)
	st := state.New()
	for _, q := range fourQueues(8 * n) {
		st.PutQueue(q)
	}
	for i := 0; i < n; i++ {
		nd := benchNode(fmt.Sprintf("n%06d", i), "H100", 8, 80*model.GiB, 30)
		st.PutNode(nd)
		r := job(fmt.Sprintf("r%06d", i), uint64(i+1), 7)
		r.State = model.JobRunning
		r.Spec.Queue = []string{"qa", "qb", "qc", "qd"}[i%4]
		st.PutJob(r)
		st.PutAttempt(&model.Attempt{ID: r.ID + "-a1", JobID: r.ID, State: model.AttemptRunning, CreatedAt: now,
			Replicas: []model.Replica{{NodeID: nd.ID, GPUs: []int{0, 1, 2, 3, 4, 5, 6}, State: model.AttemptRunning}}})
	}
	j := job("new", uint64(n+1), 1)
	j.Spec.Queue = "qa"
	st.PutJob(j)
	snap := st.Snapshot()
	runBench(b, "arrival", snap, 1, fmt.Sprintf("%d busy nodes × 8 H100 (7 used each), 1 new one-GPU job", n))
}

// BenchmarkDeepQueue is the submission benchmark's pass: 20,000 queued
// one-GPU jobs in the default queue and no nodes yet, so every job gets a
// verdict and none is placed.
func BenchmarkDeepQueue(b *testing.B) {
	var jobs []*model.Job
	for i := range 20000 {
		jobs = append(jobs, job(fmt.Sprintf("j%07d", i), uint64(i+1), 1))
	}
	snap := buildSnap(nil, jobs, nil)
	runBench(b, "deep queue", snap, 0, "no nodes, 20,000 one-GPU jobs in the default queue")
}

// BenchmarkBlockedQueue is the pass the Philly replay runs at every event
// once its fleet falls behind: 160 nodes × 8 V100 with every node busy but
// one GPU, 1,300 queued jobs of the Philly mix with runtimes of 10 minutes
// to 2 days, one queue, on-demand offers to rank. Almost every job is
// blocked; "full" takes every turn, "reuse" reuses blocked turns
// (turn.go). Both give the same plan (TestTurnReuseChangesNothing).
func BenchmarkBlockedQueue(b *testing.B) {
	st := state.New()
	rng := rand.New(rand.NewSource(3))
	for i := range 160 {
		nd := benchNode(fmt.Sprintf("n%04d", i), "V100", 8, 32*model.GiB, 24)
		st.PutNode(nd)
		r := job(fmt.Sprintf("r%04d", i), uint64(i+1), 7, estimate(time.Duration(1+rng.Intn(48))*time.Hour))
		r.State = model.JobRunning
		st.PutJob(r)
		st.PutAttempt(&model.Attempt{ID: r.ID + "-a1", JobID: r.ID, State: model.AttemptRunning, CreatedAt: now.Add(-time.Hour), Version: 1,
			Replicas: []model.Replica{{NodeID: nd.ID, GPUs: []int{0, 1, 2, 3, 4, 5, 6}, State: model.AttemptRunning}}})
	}
	total := 0
	for _, m := range phillyMix {
		total += m.count
	}
	for i := range 1300 {
		r, g := rng.Intn(total), 1
		for _, m := range phillyMix {
			if r < m.count {
				g = m.gpus
				break
			}
			r -= m.count
		}
		opts := []jobOpt{estimate(time.Duration(10+rng.Intn(2880)) * time.Minute)}
		if g > 8 {
			opts = append(opts, replicas(g/8))
			g = 8
		}
		j := job(fmt.Sprintf("j%05d", i), uint64(1000+i), float64(g), opts...)
		j.EnqueuedAt = now.Add(-time.Duration(1300-i) * time.Minute)
		st.PutJob(j)
	}
	var offers []model.Offer
	for _, region := range []string{"us-east-1", "us-west-2", "eu-west-1"} {
		offers = append(offers,
			model.Offer{Provider: "aws", Region: region, InstanceType: "p3.16xlarge", CapacityType: model.OnDemand, GPU: "V100", GPUCount: 8, GPUMemory: 16 * model.GiB, PricePerHour: 24.48},
			model.Offer{Provider: "aws", Region: region, InstanceType: "p3.2xlarge", CapacityType: model.OnDemand, GPU: "V100", GPUCount: 1, GPUMemory: 16 * model.GiB, PricePerHour: 3.06},
			model.Offer{Provider: "aws", Region: region, InstanceType: "p3dn.24xlarge", CapacityType: model.OnDemand, GPU: "V100", GPUCount: 8, GPUMemory: 32 * model.GiB, PricePerHour: 31.21})
	}
	snap := st.Snapshot()
	for _, reuse := range []bool{false, true} {
		name := "full"
		if reuse {
			name = "reuse"
		}
		b.Run(name, func(b *testing.B) {
			var plan Plan
			var reused int
			for range b.N {
				plan, reused = schedule(snap, offers, now, 1, reuse, nil)
			}
			b.ReportMetric(float64(reused), "reused-turns")
			b.ReportMetric(float64(len(plan.Bindings)), "bound")
		})
	}
}
