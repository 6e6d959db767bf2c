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

// turnWorld is randomWorld with what a blocked turn reads varied too: a
// deep tail of jobs of a few repeated shapes (the case reuse is for), a
// cohort of borrowing queues, project quotas, preempted attempts still
// releasing their GPUs, nominations, jobs with datasets, estimates that
// fall on either side of reservations' starts.
func turnWorld(rng *rand.Rand) *state.State {
	st := randomWorld(rng)
	seq := uint64(1000)
	queues := []string{model.DefaultQueue}
	if rng.Intn(3) == 0 {
		st.PutQueue(queue("a", "co", 4, 8))
		st.PutQueue(queue("b", "co", 8))
		queues = append(queues, "a", "b")
		// b borrows beyond its quota on whatever node has room.
		for _, n := range st.ActiveNodes() {
			if len(n.GPUs) >= 4 && !n.SharedGPUs && rng.Intn(2) == 0 {
				seq++
				j := job(fmt.Sprintf("borrow%d", seq), seq, 2, inQueue("b"), priority("low"), estimate(time.Duration(1+rng.Intn(5))*time.Hour))
				j.State = model.JobRunning
				j.Attempts = 1
				st.PutJob(j)
				if !free(st, n.ID, 2, 3) {
					continue
				}
				start := now.Add(-time.Duration(rng.Intn(60)) * time.Minute)
				st.PutAttempt(&model.Attempt{ID: model.AttemptID(j.ID, 1), JobID: j.ID, Number: 1, State: model.AttemptRunning, CreatedAt: start, StartedAt: &start, Version: 1,
					Replicas: []model.Replica{{NodeID: n.ID, GPUs: []int{2, 3}, State: model.AttemptRunning}}})
			}
		}
	}
	projects := []string{""}
	if rng.Intn(3) == 0 {
		st.SetProjectQuotas(map[string]map[string]float64{"nlp": {"H100": float64(rng.Intn(12))}})
		projects = append(projects, "nlp")
	}
	// Some running attempts are being preempted, and their GPUs nominated
	// for a queued job.
	var nominee string
	if rng.Intn(3) == 0 {
		for _, a := range st.Snapshot().Live {
			if rng.Intn(3) != 0 || len(a.Replicas) == 0 {
				continue
			}
			a = a.Clone()
			a.Stop, a.StopState = true, model.AttemptPreempted
			a.Version++
			st.PutAttempt(a)
			if nominee != "" {
				st.Nominate(state.Nomination{JobID: nominee, Expires: now.Add(time.Minute),
					GPUs: []state.NodeGPUs{{NodeID: a.Replicas[0].NodeID, GPUs: a.Replicas[0].GPUs}}})
			}
		}
	}
	type shape struct {
		gpus   float64
		reps   int
		prio   string
		q      string
		proj   string
		data   bool
		noEst  bool
		ic     string
		minCPU float64
	}
	var shapes []shape
	for range 1 + rng.Intn(4) {
		sh := shape{gpus: []float64{0.5, 1, 2, 4, 8, 8, 16}[rng.Intn(7)], reps: 1, prio: []string{"low", "normal", "high"}[rng.Intn(3)],
			q: queues[rng.Intn(len(queues))], proj: projects[rng.Intn(len(projects))], data: rng.Intn(8) == 0, noEst: rng.Intn(4) == 0}
		if sh.gpus >= 1 && rng.Intn(4) == 0 {
			sh.reps = 2 + rng.Intn(2)
		}
		if rng.Intn(6) == 0 {
			sh.ic = "nvlink"
		}
		if rng.Intn(6) == 0 {
			sh.minCPU = 60
		}
		shapes = append(shapes, sh)
	}
	for i := range 20 + rng.Intn(60) {
		sh := shapes[rng.Intn(len(shapes))]
		seq++
		opts := []jobOpt{inQueue(sh.q), priority(sh.prio), replicas(sh.reps), inProject(sh.proj)}
		if !sh.noEst {
			// Runtimes straddle the reservations' starts (within hours).
			opts = append(opts, estimate(time.Duration(5+rng.Intn(600))*time.Minute))
		}
		if sh.data {
			opts = append(opts, readsData("s3://bucket/set"))
		}
		if sh.ic != "" {
			opts = append(opts, func(j *model.Job) { j.Spec.Resources.GPU.Interconnect = sh.ic })
		}
		if sh.minCPU > 0 {
			opts = append(opts, cpu(sh.minCPU))
		}
		j := job(fmt.Sprintf("t%03d", i), seq, sh.gpus, opts...)
		j.EnqueuedAt = now.Add(-time.Duration(rng.Intn(300)) * time.Minute)
		st.PutJob(j)
		if nominee == "" && rng.Intn(10) == 0 {
			nominee = j.ID
		}
	}
	if nominee != "" {
		// Nominate GPUs of a stopping attempt for it, as preemption does.
		for _, a := range st.Snapshot().Live {
			if a.Stop && len(a.Replicas) > 0 {
				st.Nominate(state.Nomination{JobID: nominee, Expires: now.Add(time.Minute),
					GPUs: []state.NodeGPUs{{NodeID: a.Replicas[0].NodeID, GPUs: a.Replicas[0].GPUs}}})
				break
			}
		}
	}
	return st
}

// free reports whether GPUs gpus of node id are held by no live attempt.
func free(st *state.State, id string, gpus ...int) bool {
	for _, g := range gpus {
		if st.GPUHolder(id, g) != "" {
			return false
		}
	}
	return true
}

// Reusing a blocked job's turn (turn.go) changes nothing in any plan:
// bindings, verdicts (reasons, positions, estimated starts), candidates,
// reservations, preemptions, wake and settled are compared with reuse off
// and on, over many random worlds, each scheduled again after committing
// its plan (so passes with reservations, releasing work and bound jobs
// are covered). It fails, too, if reuse never happened, since then it
// would show nothing.
func TestTurnReuseChangesNothing(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.OnDemand, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 98},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.Spot, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 40, InterruptionRate: 0.05},
	}
	reused, turns, preempting, reserving := 0, 0, 0, 0
	for i := range 400 {
		rng := rand.New(rand.NewSource(int64(i)))
		st := turnWorld(rng)
		for pass := range 3 {
			snap := st.Snapshot()
			off, _ := schedule(snap, offers, now, int64(i), false, nil)
			on, n := schedule(snap, offers, now, int64(i), true, nil)
			if diff := cmp.Diff(off, on); diff != "" {
				t.Fatalf("world %d, pass %d: the plan with turns reused differs (-full +reused):\n%s", i, pass, diff)
			}
			reused += n
			turns += len(snap.Pending)
			if len(on.Preemptions) > 0 {
				preempting++
			}
			if len(on.Reservations) > 0 {
				reserving++
			}
			commit(st, on, now)
		}
	}
	t.Logf("%d of %d turns reused; %d plans preempt, %d reserve", reused, turns, preempting, reserving)
	if reused < turns/10 || preempting == 0 || reserving == 0 {
		t.Errorf("reused %d of %d turns, %d plans preempt, %d reserve: the worlds do not exercise reuse", reused, turns, preempting, reserving)
	}
}

// A reservation that holds free GPUs changes later turns of a shape
// remembered before it: a CPU-only job blocked on CPU (its turn is
// remembered at once, reserve never applies to it), then a GPU job of the
// same queue that reserves two free GPUs, then a CPU-only job like the
// first, whose verdict must now name the reservation.
func TestTurnReuseSeesNewReservations(t *testing.T) {
	w := newWorld([]*model.Node{node("n", "H100", 8, 80*model.GiB)})
	w.run(job("r", 1, 6, cpu(60), estimate(2*time.Hour)), now.Add(-10*time.Minute), "n", 2, 3, 4, 5, 6, 7)
	a := job("a", 2, 0, cpu(8))
	g := job("g", 3, 4, cpu(1), estimate(time.Hour))
	b := job("b", 4, 0, cpu(8))
	for i, j := range []*model.Job{a, g, b} {
		j.EnqueuedAt = now.Add(-time.Duration(30-i) * time.Minute)
	}
	w.submit(a, g, b)
	snap := w.st.Snapshot()
	off, _ := schedule(snap, nil, now, 1, false, nil)
	on, _ := schedule(snap, nil, now, 1, true, nil)
	if len(off.Reservations) == 0 || !hasCode(verdictOf(off, "b"), ReasonReserved) {
		t.Fatalf("the world does not show what it is for: reservations %v, b's verdict %v", off.Reservations, verdictOf(off, "b"))
	}
	if diff := cmp.Diff(off, on); diff != "" {
		t.Errorf("the plan with turns reused differs (-full +reused):\n%s", diff)
	}
}

func hasCode(v Verdict, code string) bool {
	for _, r := range v.Reasons {
		if r.Code == code {
			return true
		}
	}
	return false
}

// verdictOf is p's verdict for job id, the zero Verdict when it has none.
func verdictOf(p Plan, id string) Verdict {
	v, _ := p.Verdicts.Get(id)
	return v
}
