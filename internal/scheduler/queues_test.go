package scheduler

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

func queue(name, cohort string, nominal float64, limit ...float64) *model.Queue {
	q := &model.Queue{Name: name, Spec: model.QueueSpec{Cohort: cohort, Quota: map[string]model.GPUQuota{model.AnyGPU: {Nominal: nominal}}}}
	if len(limit) > 0 {
		l := limit[0]
		q.Spec.Quota[model.AnyGPU] = model.GPUQuota{Nominal: nominal, BorrowingLimit: &l}
	}
	return q
}

func inQueue(q string) jobOpt  { return func(j *model.Job) { j.Spec.Queue = q } }
func priority(p string) jobOpt { return func(j *model.Job) { j.Spec.Priority = p } }
func estimate(d time.Duration) jobOpt {
	return func(j *model.Job) { j.Spec.Estimate.Runtime = model.Duration(d) }
}

type world struct {
	st *state.State
}

func newWorld(nodes []*model.Node, queues ...*model.Queue) *world {
	w := &world{st: state.New()}
	for _, q := range queues {
		w.st.PutQueue(q)
	}
	for _, n := range nodes {
		w.st.PutNode(n)
	}
	return w
}

func (w *world) submit(jobs ...*model.Job) {
	for _, j := range jobs {
		w.st.PutJob(j)
	}
}

// run starts a job on GPUs as a live attempt.
func (w *world) run(j *model.Job, started time.Time, nodeID string, gpus ...int) *model.Attempt {
	j = j.Clone()
	j.State = model.JobRunning
	w.st.PutJob(j)
	a := &model.Attempt{ID: j.ID + "-a1", JobID: j.ID, State: model.AttemptRunning, CreatedAt: started, StartedAt: &started, Version: 1,
		Replicas: []model.Replica{{NodeID: nodeID, GPUs: gpus, State: model.AttemptRunning}}}
	w.st.PutAttempt(a)
	return a
}

func boundIDs(p Plan) []string {
	var out []string
	for _, b := range p.Bindings {
		out = append(out, b.JobID)
	}
	return out
}

func TestQuotaAndBorrowing(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	w := newWorld([]*model.Node{n}, queue("qa", "c", 2, 2), queue("qb", "c", 6), queue("solo", "", 1))
	w.submit(job("a1", 1, 2, inQueue("qa")), job("a2", 2, 2, inQueue("qa")), job("a3", 3, 2, inQueue("qa")),
		job("s1", 4, 1, inQueue("solo")), job("s2", 5, 1, inQueue("solo")))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	got := strings.Join(boundIDs(plan), ",")
	// qa: 2 nominal + 2 borrowed from qb; a3 would borrow 4 > limit 2.
	for _, want := range []string{"a1", "a2", "s1"} {
		if !strings.Contains(got, want) {
			t.Errorf("bound %s, want %s among them", got, want)
		}
	}
	if strings.Contains(got, "a3") || strings.Contains(got, "s2") {
		t.Errorf("bound %s: a3 exceeds the borrowing limit and s2 the solo quota", got)
	}
	if msg := fmt.Sprint(verdictOf(plan, "a3").Reasons); !strings.Contains(msg, "borrowingLimit") {
		t.Errorf("a3 verdict = %s, want borrowingLimit", msg)
	}
	if msg := fmt.Sprint(verdictOf(plan, "s2").Reasons); !strings.Contains(msg, "no cohort") {
		t.Errorf("s2 verdict = %s, want no cohort", msg)
	}
}

func TestReclaimBorrowedQuota(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	w := newWorld([]*model.Node{n}, queue("lender", "c", 4), queue("borrower", "c", 4))
	// The borrower runs 8 GPUs (4 borrowed); the lender wants its 4 back.
	early := now.Add(-2 * time.Hour)
	w.run(job("b-old", 1, 4, inQueue("borrower")), early, "a", 0, 1, 2, 3)
	w.run(job("b-new", 2, 4, inQueue("borrower")), now.Add(-10*time.Minute), "a", 4, 5, 6, 7)
	w.submit(job("l1", 3, 4, inQueue("lender")))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].JobID != "b-new" {
		t.Fatalf("preemptions = %+v, want exactly b-new (least work lost)", plan.Preemptions)
	}
	if len(plan.Bindings) != 0 {
		t.Fatalf("bound %v before the victim stopped", boundIDs(plan))
	}
}

func TestPreemptInQueueForPriority(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	w := newWorld([]*model.Node{n})
	w.run(job("low1", 1, 2, priority("low")), now.Add(-time.Hour), "a", 0, 1)
	w.run(job("low2", 2, 2, priority("low")), now.Add(-5*time.Minute), "a", 2, 3)
	w.run(job("crit", 3, 4, priority("critical")), now.Add(-time.Minute), "a", 4, 5, 6, 7)
	w.submit(job("hi", 4, 2, priority("high")))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].JobID != "low2" {
		t.Fatalf("preemptions = %+v, want only low2 (never more than needed, least work lost)", plan.Preemptions)
	}
	// Next pass, with low2 stopping: no further victims.
	a, _ := w.st.Attempt("low2-a1")
	a = a.Clone()
	a.Stop, a.StopState, a.Version = true, model.AttemptPreempted, 2
	w.st.PutAttempt(a)
	plan = Schedule(w.st.Snapshot(), nil, now, 1)
	if len(plan.Preemptions) != 0 {
		t.Fatalf("second pass preempted %+v; want to wait for the stopping victim", plan.Preemptions)
	}
	if msg := fmt.Sprint(verdictOf(plan, "hi").Reasons); !strings.Contains(msg, "waiting for 1 preempted") {
		t.Fatalf("verdict = %s", msg)
	}
}

func TestBackfillReservation(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	w := newWorld([]*model.Node{n})
	w.run(job("running", 1, 4, estimate(2*time.Hour)), now.Add(-time.Hour), "a", 0, 1, 2, 3)
	w.submit(job("big", 2, 8), job("long", 3, 2, estimate(3*time.Hour)), job("short", 4, 2, estimate(30*time.Minute)))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	if got := strings.Join(boundIDs(plan), ","); got != "short" {
		t.Fatalf("bound %q, want only short (long would delay big's reserved start)", got)
	}
	v := verdictOf(plan, "big")
	if v.EstimatedStart == nil || !v.EstimatedStart.Equal(now.Add(time.Hour)) {
		t.Fatalf("big's estimated start = %v, want now+1h", v.EstimatedStart)
	}
	if len(plan.Reservations) != 1 || plan.Reservations[0].JobID != "big" {
		t.Fatalf("reservations = %+v", plan.Reservations)
	}
}

func TestSharedGPUs(t *testing.T) {
	shared := node("s", "L4", 2, 24*model.GiB)
	shared.SharedGPUs = true
	whole := node("w", "L4", 2, 24*model.GiB)
	w := newWorld([]*model.Node{shared, whole})
	w.submit(job("q1", 1, 0.5), job("q2", 2, 0.25), job("q3", 3, 0.5), job("whole", 4, 1), job("q4", 5, 0.75), job("q5", 6, 0.5))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	per := map[string]float64{}
	for _, b := range plan.Bindings {
		for _, r := range b.Replicas {
			if r.NodeID == "s" {
				if r.Share == 0 {
					t.Fatalf("%s got a whole shared GPU", b.JobID)
				}
				per[fmt.Sprint(r.GPUs)] += r.Share
			} else if r.Share > 0 {
				t.Fatalf("%s placed a fraction on an unshared node", b.JobID)
			}
		}
	}
	for g, f := range per {
		if f > 1+1e-9 {
			t.Fatalf("shared GPU %s holds %g", g, f)
		}
	}
	if plan.Verdicts.Len() == 0 {
		t.Fatalf("every fraction bound (2.5 GPUs on 2 shared GPUs): %v", per)
	}
	if _, pending := plan.Verdicts.Get("whole"); pending {
		t.Fatalf("the whole-GPU job should run on the unshared node")
	}
}

func TestDependencies(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	w := newWorld([]*model.Node{n})
	done := job("done", 1, 1)
	done.State = model.JobSucceeded
	failed := job("failed", 2, 1)
	failed.State = model.JobFailed
	w.submit(done, failed)
	after := func(id, on string) jobOpt {
		return func(j *model.Job) { j.Spec.After = append(j.Spec.After, model.Dependency{Job: id, On: on}) }
	}
	w.submit(job("ok", 3, 1, after("done", "ok")), job("never", 4, 1, after("failed", "ok")), job("any", 5, 1, after("failed", "any")), job("ghost", 6, 1, after("nope", "")))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	if got := strings.Join(boundIDs(plan), ","); got != "ok,any" {
		t.Fatalf("bound %q, want ok,any", got)
	}
	if msg := fmt.Sprint(verdictOf(plan, "never").Reasons); !strings.Contains(msg, "can never start") {
		t.Fatalf("never: %s", msg)
	}
}

func TestFairShareOrdersQueues(t *testing.T) {
	n := node("a", "H100", 4, 80*model.GiB)
	w := newWorld([]*model.Node{n}, &model.Queue{Name: "busy"}, &model.Queue{Name: "idle"})
	w.st.AddUsage("busy", 1000, now.Add(-time.Hour))
	w.submit(job("b1", 1, 2, inQueue("busy")), job("b2", 2, 2, inQueue("busy")), job("i1", 3, 2, inQueue("idle")), job("i2", 4, 2, inQueue("idle")))
	plan := Schedule(w.st.Snapshot(), nil, now, 1)
	if got := strings.Join(boundIDs(plan), ","); got != "i1,i2" {
		t.Fatalf("bound %q; the queue that just ran a burst should wait its turn", got)
	}
}

func TestExpectedCostPrefersCheapSpotWithCheckpoints(t *testing.T) {
	od := model.Offer{Provider: "p", Region: "r", InstanceType: "x", GPU: "H100", GPUCount: 8, CapacityType: model.OnDemand, PricePerHour: 40}
	sp := od
	sp.CapacityType, sp.PricePerHour, sp.InterruptionRate = model.Spot, 15, 0.1
	if a, b := ExpectedCost(sp, 1, 10*time.Hour, 30*time.Minute), ExpectedCost(od, 1, 10*time.Hour, 0); a >= b {
		t.Fatalf("spot %g ≥ on-demand %g", a, b)
	}
	// Without checkpoints an interruption loses half the run.
	if ExpectedCost(sp, 1, 10*time.Hour, 0) <= ExpectedCost(sp, 1, 10*time.Hour, 30*time.Minute) {
		t.Fatal("checkpoints should lower the expected cost of spot")
	}
}

// TestScheduleQueueInvariants: over random clusters, queues and running
// work, no plan exceeds a quota beyond what borrowing allows, oversubscribes
// a GPU, or splits a gang, and the same input gives the same plan.
func TestScheduleQueueInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for round := 0; round < 150; round++ {
		var nodes []*model.Node
		for i := 0; i < 1+rng.Intn(10); i++ {
			nodes = append(nodes, node(fmt.Sprintf("n%02d", i), []string{"H100", "A100"}[rng.Intn(2)], []int{1, 2, 4, 8}[rng.Intn(4)], 80*model.GiB))
		}
		var queues []*model.Queue
		for i := 0; i < 1+rng.Intn(4); i++ {
			q := queue(fmt.Sprintf("q%d", i), []string{"", "c1", "c2"}[rng.Intn(3)], float64(rng.Intn(12)))
			if rng.Intn(2) == 0 {
				q = queue(q.Name, q.Spec.Cohort, q.Spec.Quota[model.AnyGPU].Nominal, float64(rng.Intn(6)))
			}
			queues = append(queues, q)
		}
		w := newWorld(nodes, queues...)
		var jobs []*model.Job
		for i := 0; i < rng.Intn(30); i++ {
			j := job(fmt.Sprintf("j%02d", i), uint64(i+1), float64([]int{1, 1, 2, 4, 8}[rng.Intn(5)]),
				replicas(1+rng.Intn(3)), inQueue(queues[rng.Intn(len(queues))].Name), priority([]string{"low", "normal", "high"}[rng.Intn(3)]))
			jobs = append(jobs, j)
		}
		w.submit(jobs...)
		snap := w.st.Snapshot()
		plan := Schedule(snap, nil, now, int64(round))
		if again := Schedule(snap, nil, now, int64(round)); fmt.Sprint(plan) != fmt.Sprint(again) {
			t.Fatalf("round %d: plan not deterministic", round)
		}
		byJob := map[string]*model.Job{}
		for _, j := range jobs {
			byJob[j.ID] = j
		}
		used := map[string]float64{}
		gpus := map[string]bool{}
		for _, b := range plan.Bindings {
			j := byJob[b.JobID]
			if len(b.Replicas) != j.Spec.Replicas {
				t.Fatalf("round %d: gang %s split", round, j.ID)
			}
			for _, r := range b.Replicas {
				for _, g := range r.GPUs {
					k := r.NodeID + fmt.Sprint(g)
					if gpus[k] {
						t.Fatalf("round %d: GPU %s bound twice", round, k)
					}
					gpus[k] = true
				}
				used[j.Spec.Queue] += float64(len(r.GPUs))
			}
		}
		nominal := map[string]float64{}
		for _, q := range queues {
			nominal[q.Spec.Cohort] += q.Spec.Quota[model.AnyGPU].Nominal
		}
		for _, q := range queues {
			l := q.Spec.Quota[model.AnyGPU]
			if used[q.Name] <= l.Nominal+eps {
				continue
			}
			if q.Spec.Cohort == "" {
				t.Fatalf("round %d: %s uses %g over nominal %g without a cohort", round, q.Name, used[q.Name], l.Nominal)
			}
			if l.BorrowingLimit != nil && used[q.Name]-l.Nominal > *l.BorrowingLimit+eps {
				t.Fatalf("round %d: %s borrows beyond its limit", round, q.Name)
			}
			// A queue borrows only what its cohort's other members own;
			// a lender within its nominal is always admitted (borrowed
			// work is reclaimed by preemption when GPUs run short).
			if others := nominal[q.Spec.Cohort] - l.Nominal; used[q.Name]-l.Nominal > others+eps {
				t.Fatalf("round %d: %s borrows %g, its cohort's others own %g", round, q.Name, used[q.Name]-l.Nominal, others)
			}
		}
	}
}
