package scheduler

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// A pass with a Memory decides what a pass without one decides: whole
// plans (bindings, verdicts, candidates, reservations, preemptions, wake,
// settled) are compared at every pass of many random worlds, each run for
// ten passes with a random change set between them: the plan
// committed, attempts ending, jobs cancelled, jobs changed in place of
// their old record (priority, enqueue time, back-off, deadline, spot
// fallback, shape; as a new record or the old one changed in place with
// a higher version), new jobs (some with deadlines or dependencies), the
// priority classes redeclared, and the clock moved. A third of the change
// sets leave the pending list alone but for one record changed in place
// or the classes redeclared, so that the next pass may take the last
// pass's jobs whole (jobMemory.lastList) and must see those two. It
// fails, too, when the memory is never used, never sees a changed job or
// never takes a list whole, since then it would show nothing.
func TestMemoryChangesNothing(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.OnDemand, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 98},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.Spot, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 40, InterruptionRate: 0.05},
	}
	var hits, misses, changed, passes, quietPasses, inPlace, lists, merged int
	worlds := 150
	if testing.Short() {
		worlds = 40
	}
	for i := range worlds {
		rng := rand.New(rand.NewSource(int64(i)))
		st := turnWorld(rng)
		var m Memory
		at := now
		seq := uint64(100000)
		// change changes j as a submission or edit could.
		change := func(j *model.Job) {
			j.Version++
			switch rng.Intn(6) {
			case 0:
				j.Spec.Priority = []string{"low", "normal", "high", "urgent"}[rng.Intn(4)]
			case 1:
				j.EnqueuedAt = at.Add(-time.Duration(rng.Intn(200)) * time.Minute)
			case 2:
				retry := at.Add(time.Duration(rng.Intn(30)-10) * time.Minute)
				retryAt(retry, 1+rng.Intn(3))(j)
			case 3:
				deadlineIn(time.Duration(1+rng.Intn(10))*time.Hour, time.Duration(1+rng.Intn(5))*time.Hour, 30*time.Minute)(j)
			case 4:
				j.Spec.Spot = model.SpotAllowed
				j.Spec.Retries.OnDemandAfterPreemptions = 1
				j.Preemptions = rng.Intn(2)
			case 5:
				j.Spec.Resources.GPUs = []float64{0.5, 1, 2, 4, 8}[rng.Intn(5)]
				j.Spec.Estimate.Runtime = model.Duration(time.Duration(1+rng.Intn(300)) * time.Minute)
			}
		}
		for pass := range 10 {
			snap := st.Snapshot()
			full := Schedule(snap, offers, at, int64(i))
			h0, m0, l0, g0 := m.mem.hits, m.mem.misses, m.mem.lists, m.mem.merged
			got := m.Schedule(snap, offers, at, int64(i))
			lists += m.mem.lists - l0
			merged += m.mem.merged - g0
			if diff := cmp.Diff(full, got); diff != "" {
				t.Fatalf("world %d, pass %d: the plan with the memory differs (-full +memory):\n%s", i, pass, diff)
			}
			hits += m.mem.hits - h0
			misses += m.mem.misses - m0
			passes++

			// The change set before the next pass. A quiet one leaves
			// the pending list as it is (the next pass may take the
			// memory's list whole), but for at most one record changed
			// in place or the classes redeclared.
			quiet := rng.Intn(3) == 0
			// Half the other change sets store only new records, as the
			// controller does: the next pass may copy the jobs of the
			// records it shares with this one (jobMemory.passJobs).
			asController := rng.Intn(2) == 0
			if !quiet {
				commit(st, got, at)
			}
			at = at.Add(time.Duration(rng.Intn(90)) * time.Minute)
			for _, a := range st.Snapshot().Live {
				if rng.Intn(4) != 0 {
					continue
				}
				a = a.Clone()
				a.State = model.AttemptSucceeded
				a.Version++
				st.PutAttempt(a)
				if j, ok := st.Job(a.JobID); ok {
					j = j.Clone()
					j.State = model.JobSucceeded
					j.Version++
					st.PutJob(j)
				}
			}
			if quiet {
				quietPasses++
				p := st.Snapshot().Pending
				switch {
				case len(p) > 0 && rng.Intn(2) == 0:
					j := p[rng.Intn(len(p))] // changed in place
					change(j)
					st.PutJob(j)
					inPlace++
				case rng.Intn(3) == 0:
					st.SetPriorityClasses([]model.PriorityClass{{Name: "urgent", Value: 500 + rng.Intn(1000), Preemptible: rng.Intn(2) == 0}})
				}
				continue
			}
			for _, j := range st.Snapshot().Pending {
				switch rng.Intn(12) {
				case 0:
					j = j.Clone()
					j.State = model.JobCancelled
					j.Version++
					st.PutJob(j)
				case 1, 2:
					if asController || rng.Intn(2) == 0 {
						// A new record, as the controller writes one.
						j = j.Clone()
					}
					// Else the record is changed in place, its version
					// raised: the memory must not trust the pointer alone.
					change(j)
					st.PutJob(j)
					changed++
				}
			}
			for range rng.Intn(8) {
				seq++
				opts := []jobOpt{priority([]string{"low", "normal", "high"}[rng.Intn(3)]), estimate(time.Duration(5+rng.Intn(600)) * time.Minute)}
				switch rng.Intn(5) {
				case 0:
					opts = append(opts, deadlineIn(time.Duration(2+rng.Intn(20))*time.Hour, time.Duration(1+rng.Intn(5))*time.Hour, 30*time.Minute))
				case 1:
					if p := st.Snapshot().Pending; len(p) > 0 {
						opts = append(opts, func(j *model.Job) {
							j.Spec.After = append(j.Spec.After, model.Dependency{Job: p[rng.Intn(len(p))].ID, On: model.AfterAny})
						})
					}
				}
				j := job(fmt.Sprintf("new%d", seq), seq, []float64{0.5, 1, 2, 4, 8}[rng.Intn(5)], opts...)
				j.EnqueuedAt = at.Add(-time.Duration(rng.Intn(30)) * time.Minute)
				st.PutJob(j)
			}
			if rng.Intn(8) == 0 {
				// Redeclared classes: the memory must drop what it derived.
				st.SetPriorityClasses([]model.PriorityClass{{Name: "urgent", Value: 500 + rng.Intn(1000), Preemptible: rng.Intn(2) == 0}})
			}
		}
	}
	t.Logf("%d passes: %d jobs from the memory (%d copied from the last pass's list), %d derived anew, %d jobs changed; %d quiet change sets (%d records changed in place), %d passes took the last list whole",
		passes, hits, merged, misses, changed, quietPasses, inPlace, lists)
	if hits < misses || changed == 0 || lists == 0 || inPlace == 0 || merged == 0 {
		t.Errorf("%d jobs from the memory, %d derived, %d changed, %d lists taken whole, %d changed in place: the worlds do not exercise the memory",
			hits, misses, changed, lists, inPlace)
	}
}

// The memory forgets jobs that left the queue.
func TestMemoryForgetsJobsThatLeft(t *testing.T) {
	w := newWorld([]*model.Node{node("n", "H100", 8, 80*model.GiB)})
	var m Memory
	for i := range 200 {
		j := job(fmt.Sprintf("j%03d", i), uint64(i+1), 16) // fits nowhere: stays queued
		w.submit(j)
		m.Schedule(w.st.Snapshot(), nil, now, 1)
		if i%2 == 0 {
			j = j.Clone()
			j.State = model.JobCancelled
			j.Version++
			w.st.PutJob(j)
		}
	}
	pending := len(w.st.Snapshot().Pending)
	if n := len(m.mem.jobs); n > 2*pending+64+1 {
		t.Errorf("the memory holds %d jobs for %d pending", n, pending)
	}
}

// Jobs of one shape share the memory's interned fitKey, and jobs of
// another shape get another; the keys of forgotten jobs are dropped with
// them.
func TestMemoryInternsFitKeys(t *testing.T) {
	w := newWorld([]*model.Node{node("n", "H100", 8, 80*model.GiB)})
	var m Memory
	var jobs []*model.Job
	for i := range 6 {
		j := job(fmt.Sprintf("j%d", i), uint64(i+1), float64(16+8*(i%2))) // fits nowhere: stays queued
		w.submit(j)
		jobs = append(jobs, j)
	}
	classes := w.st.Snapshot().PriorityClasses
	m.Schedule(w.st.Snapshot(), nil, now, 1)
	key := func(j *model.Job) *fitKey { return m.mem.pjob(j, classes).key }
	for i, j := range jobs {
		if key(j) == nil {
			t.Fatalf("job %s has no interned key", j.ID)
		}
		if got, want := key(j), key(jobs[i%2]); got != want {
			t.Errorf("jobs %s and %s have one shape but keys %p and %p", j.ID, jobs[i%2].ID, got, want)
		}
	}
	if key(jobs[0]) == key(jobs[1]) {
		t.Error("jobs of two shapes share a key")
	}
	if n := len(m.mem.keys); n != 2 {
		t.Errorf("the memory holds %d keys for 2 shapes", n)
	}

	// Every job of the second shape leaves, then enough jobs come and go
	// for the memory to drop them.
	for _, j := range odd(jobs) {
		j = j.Clone()
		j.State = model.JobCancelled
		j.Version++
		w.st.PutJob(j)
	}
	for i := range 200 {
		j := job(fmt.Sprintf("k%03d", i), uint64(100+i), 16)
		w.submit(j)
		m.Schedule(w.st.Snapshot(), nil, now, 1)
		j = j.Clone()
		j.State = model.JobCancelled
		j.Version++
		w.st.PutJob(j)
	}
	if n := len(m.mem.keys); n != 1 {
		t.Errorf("the memory holds %d keys for 1 shape", n)
	}
}

func odd(js []*model.Job) []*model.Job {
	var out []*model.Job
	for i := 1; i < len(js); i += 2 {
		out = append(out, js[i])
	}
	return out
}
