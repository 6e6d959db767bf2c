package scheduler

import (
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// Verdicts are filled by each job's place in the snapshot's pending list,
// not by its id; this checks they still land on their own jobs, over
// random worlds with budget holds (which take jobs out of the list the
// queues are built from) and with the pending list shuffled:
//   - every pending job is either bound or has a verdict, and Len counts
//     them;
//   - a held job's verdict is its hold's, without a position;
//   - any other job's position is its own place in its queue's order,
//     recomputed here from the job (so a verdict given to the wrong job
//     shows);
//   - a shuffled pending list gives the same verdicts by id, and a pass
//     with a Memory the same as one without;
//   - All yields the pending order, and Get agrees with it.
func TestVerdictsFollowTheirJobs(t *testing.T) {
	offers := []model.Offer{{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", CapacityType: model.OnDemand, GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, PricePerHour: 98}}
	var held, placed int
	for i := range 300 {
		rng := rand.New(rand.NewSource(int64(i)))
		st := turnWorld(rng)
		snap := st.Snapshot()
		var holds []state.Hold
		for range rng.Intn(3) {
			h := state.Hold{Until: now.Add(time.Hour), Reason: "budget b", SpotOnly: rng.Intn(3) == 0}
			switch rng.Intn(4) {
			case 0:
				h.Scope.Project = "nlp"
			case 1:
				h.Scope.Queue = []string{model.DefaultQueue, "a", "b"}[rng.Intn(3)]
			case 2:
				h.Until = now // expired: holds nothing
			}
			holds = append(holds, h)
		}
		snap.Holds = holds
		plan := Schedule(snap, offers, now, int64(i))

		bound := map[string]bool{}
		for _, b := range plan.Bindings {
			bound[b.JobID] = true
		}
		order := map[string][]*pjob{}
		heldJobs := map[string]string{}
		for _, j := range snap.Pending {
			if why := heldBy(holds, j, now); why != "" {
				heldJobs[j.ID] = why
				continue
			}
			pj := jobPJob(j, snap.PriorityClasses)
			pj.atPass(now)
			order[pj.queue] = append(order[pj.queue], &pj)
		}
		position := map[string]int{}
		for _, list := range order {
			slices.SortStableFunc(list, (*pjob).compare)
			for k, pj := range list {
				position[pj.id] = k + 1
			}
		}
		n := 0
		for _, j := range snap.Pending {
			v, ok := plan.Verdicts.Get(j.ID)
			if ok == bound[j.ID] {
				t.Fatalf("world %d: job %s bound %v, has a verdict %v", i, j.ID, bound[j.ID], ok)
			}
			if !ok {
				placed++
				continue
			}
			n++
			if why := heldJobs[j.ID]; why != "" {
				held++
				if v.Position != 0 || len(v.Reasons) != 1 || v.Reasons[0].Message != why {
					t.Fatalf("world %d: held job %s has verdict %+v, want its hold %q", i, j.ID, v, why)
				}
				continue
			}
			if v.Position != position[j.ID] || v.Queue != j.Spec.Queue {
				t.Fatalf("world %d: job %s has verdict %+v, want position %d in queue %q", i, j.ID, v, position[j.ID], j.Spec.Queue)
			}
		}
		if plan.Verdicts.Len() != n {
			t.Fatalf("world %d: Len %d, %d jobs have verdicts", i, plan.Verdicts.Len(), n)
		}
		var ids []string
		for id, v := range plan.Verdicts.All() {
			ids = append(ids, id)
			if w, _ := plan.Verdicts.Get(id); !cmp.Equal(v, w) {
				t.Fatalf("world %d: All gives %s %+v, Get %+v", i, id, v, w)
			}
		}
		var want []string
		for _, j := range snap.Pending {
			if !bound[j.ID] {
				want = append(want, j.ID)
			}
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("world %d: All yields %v, want the pending order %v", i, ids, want)
		}

		shuffled := *snap
		shuffled.Pending = slices.Clone(snap.Pending)
		rng.Shuffle(len(shuffled.Pending), func(a, b int) { shuffled.Pending[a], shuffled.Pending[b] = shuffled.Pending[b], shuffled.Pending[a] })
		if diff := cmp.Diff(plan.Verdicts.Map(), Schedule(&shuffled, offers, now, int64(i)).Verdicts.Map()); diff != "" {
			t.Fatalf("world %d: a shuffled pending list gives other verdicts (-in order +shuffled):\n%s", i, diff)
		}
		var m Memory
		m.Schedule(&shuffled, offers, now, int64(i))
		if diff := cmp.Diff(plan.Verdicts.Map(), m.Schedule(snap, offers, now, int64(i)).Verdicts.Map()); diff != "" {
			t.Fatalf("world %d: the memory's second pass gives other verdicts (-plain +memory):\n%s", i, diff)
		}
	}
	t.Logf("%d verdicts of held jobs, %d jobs bound", held, placed)
	if held == 0 || placed == 0 {
		t.Errorf("%d held, %d bound: the worlds do not exercise holds and bindings", held, placed)
	}
}
