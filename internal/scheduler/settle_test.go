package scheduler

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// commit applies plan's bindings to st as the controller does (a new
// attempt per bound job, the job admitted), at now.
func commit(st *state.State, plan Plan, now time.Time) {
	for _, b := range plan.Bindings {
		j, _ := st.Job(b.JobID)
		j = j.Clone()
		j.Attempts++
		j.State = model.JobAdmitted
		j.Version++
		st.PutJob(j)
		a := &model.Attempt{ID: model.AttemptID(j.ID, j.Attempts), JobID: j.ID, Number: j.Attempts, State: model.AttemptStarting, CreatedAt: now, Version: 1}
		for _, p := range b.Replicas {
			a.Replicas = append(a.Replicas, model.Replica{Rank: p.Rank, NodeID: p.NodeID, GPUs: p.GPUs, GPUShare: p.Share, State: model.AttemptStarting})
		}
		st.PutAttempt(a)
	}
}

// randomWorld is a fleet of mixed nodes, some running work, and a queue of
// mixed jobs (gangs, fractions, priorities, estimates, a second queue in
// some worlds), drawn from rng.
func randomWorld(rng *rand.Rand) *state.State {
	st := state.New()
	queues := []string{model.DefaultQueue}
	if rng.Intn(4) == 0 {
		queues = append(queues, "other")
		st.PutQueue(queue("other", "", 16))
	}
	prios := []string{"low", "normal", "normal", "high"}
	if rng.Intn(2) == 0 {
		prios = []string{"normal"} // nothing to preempt
	}
	sizes := []int{1, 2, 4, 8}
	nodes := 2 + rng.Intn(10)
	seq := uint64(0)
	for i := range nodes {
		n := node(fmt.Sprintf("n%02d", i), "H100", sizes[rng.Intn(len(sizes))], 80*model.GiB)
		if rng.Intn(5) == 0 {
			n.SharedGPUs = true
		}
		st.PutNode(n)
		// Some of its GPUs run a job already.
		if used := rng.Intn(len(n.GPUs) + 1); used > 0 && !n.SharedGPUs {
			seq++
			prio := prios[rng.Intn(len(prios))]
			j := job(fmt.Sprintf("run%03d", seq), seq, float64(used), priority(prio), estimate(time.Duration(1+rng.Intn(10))*time.Hour))
			j.State = model.JobRunning
			j.Attempts = 1
			st.PutJob(j)
			start := now.Add(-time.Duration(rng.Intn(120)) * time.Minute)
			gpus := make([]int, used)
			for g := range gpus {
				gpus[g] = g
			}
			st.PutAttempt(&model.Attempt{ID: model.AttemptID(j.ID, 1), JobID: j.ID, Number: 1, State: model.AttemptRunning, CreatedAt: start, StartedAt: &start, Version: 1,
				Replicas: []model.Replica{{NodeID: n.ID, GPUs: gpus, State: model.AttemptRunning}}})
		}
	}
	for range 5 + rng.Intn(40) {
		seq++
		gpus := []float64{0.5, 1, 1, 2, 4, 8, 8, 16}[rng.Intn(8)]
		opts := []jobOpt{inQueue(queues[rng.Intn(len(queues))]), priority(prios[rng.Intn(len(prios))])}
		if rng.Intn(3) > 0 {
			opts = append(opts, estimate(time.Duration(10+rng.Intn(600))*time.Minute))
		}
		if gpus >= 1 && rng.Intn(4) == 0 {
			opts = append(opts, replicas(2+rng.Intn(2)))
		}
		j := job(fmt.Sprintf("q%03d", seq), seq, gpus, opts...)
		j.EnqueuedAt = now.Add(-time.Duration(rng.Intn(300)) * time.Minute)
		st.PutJob(j)
	}
	return st
}

// A settled plan is what Plan.Settled promises: the pass after its
// commit, at the same time, binds and preempts nothing and ranks the
// same candidates. Worlds are random; the test also fails if too few of
// them are settled to say anything.
func TestSettledPlanLeavesNothingForTheNextPass(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.OnDemand, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 98},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.Spot, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 40, InterruptionRate: 0.05},
	}
	settled, bound := 0, 0
	for i := range 400 {
		rng := rand.New(rand.NewSource(int64(i)))
		st := randomWorld(rng)
		plan := Schedule(st.Snapshot(), offers, now, 1)
		if len(plan.Bindings) > 0 {
			bound++
		}
		if !plan.Settled {
			continue
		}
		settled++
		commit(st, plan, now)
		again := Schedule(st.Snapshot(), offers, now, 1)
		if len(again.Bindings) > 0 || len(again.Preemptions) > 0 {
			t.Errorf("world %d: plan settled, but the next pass binds %v and preempts %v", i, boundIDs(again), again.Preemptions)
		}
		if diff := cmp.Diff(plan.Candidates, again.Candidates); diff != "" {
			t.Errorf("world %d: plan settled, but the next pass ranks other candidates (-settled +next):\n%s", i, diff)
		}
	}
	t.Logf("%d of 400 worlds bound something, %d of them settled", bound, settled)
	if settled < bound/4 {
		t.Errorf("only %d of %d plans that bound something are settled: the check proves nothing", settled, bound)
	}
}

// The converse, on worlds whose next pass does decide more (a reservation
// moved once the work bound before it counts as running, or a second
// queue's turn came): none of those plans is settled.
func TestUnsettledWhenTheNextPassBinds(t *testing.T) {
	checked := 0
	for i := range 400 {
		rng := rand.New(rand.NewSource(int64(i)))
		st := randomWorld(rng)
		plan := Schedule(st.Snapshot(), nil, now, 1)
		if len(plan.Bindings) == 0 || len(plan.Preemptions) > 0 {
			continue
		}
		commit(st, plan, now)
		again := Schedule(st.Snapshot(), nil, now, 1)
		if len(again.Bindings) > 0 || len(again.Preemptions) > 0 {
			checked++
			if plan.Settled {
				t.Errorf("world %d: the next pass binds %v, yet the plan was settled", i, boundIDs(again))
			}
		}
	}
	t.Logf("%d worlds whose next pass decides more", checked)
	if checked == 0 {
		t.Error("no world's next pass decides more: the test shows nothing")
	}
}
