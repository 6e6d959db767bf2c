package controller

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/state"
)

// The scale cycle keeps its pending jobs and the memory's forgetting
// from one cycle to the next while nothing they read changed
// (pendingInputLocked, forgetJobsLocked). Over random runs of plans
// replaced, jobs changing state or shape (as new records or changed in
// place), nodes readied, and launches failing for jobs that wait or not,
// the kept list equals one built afresh at every cycle, and the memory
// equals a twin that forgets at every cycle.
func TestScaleInputKeptEqualsRebuilt(t *testing.T) {
	offers := []model.Offer{
		{Provider: "sim", Region: "r1", InstanceType: "a", CapacityType: model.OnDemand, GPU: "V100", GPUCount: 8, PricePerHour: 20},
		{Provider: "sim", Region: "r2", InstanceType: "b", CapacityType: model.Spot, GPU: "V100", GPUCount: 8, PricePerHour: 7},
	}
	states := []model.JobState{model.JobQueued, model.JobQueued, model.JobAdmitted, model.JobProvisioning, model.JobRunning, model.JobSucceeded}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var kept, forgotSkipped, inPlace int
	for world := range 300 {
		rng := rand.New(rand.NewSource(int64(world)))
		c := &Controller{st: state.New()}
		var twin autoscaler.Memory
		var ids []string
		for i := range 5 + rng.Intn(30) {
			id := fmt.Sprintf("j%d", i)
			ids = append(ids, id)
			c.st.PutJob(&model.Job{ID: id, Seq: uint64(i + 1), Version: 1, State: states[rng.Intn(len(states))], Spec: model.JobSpec{Replicas: 1 + rng.Intn(2), Resources: model.Resources{GPUs: []float64{0.5, 1, 8}[rng.Intn(3)]}}})
		}
		newPlan := func() {
			p := &scheduler.Plan{}
			for _, id := range ids {
				if rng.Intn(3) != 0 {
					o := offers[rng.Intn(len(offers)):]
					p.Candidates = append(p.Candidates, scheduler.Candidate{JobID: id, Instances: 1, Offers: o, Costs: []float64{rng.Float64()}})
				}
			}
			c.lastPlan = p
		}
		newPlan()
		for cycle := range 60 {
			now = now.Add(time.Minute)
			var readied map[string]bool
			switch rng.Intn(8) {
			case 0:
				newPlan()
			case 1, 2:
				j, _ := c.st.Job(ids[rng.Intn(len(ids))])
				if rng.Intn(2) == 0 {
					j = j.Clone()
				} else {
					inPlace++
				}
				j.Version++
				j.State = states[rng.Intn(len(states))]
				j.Spec.Replicas = 1 + rng.Intn(3)
				c.st.PutJob(j)
			case 3:
				readied = map[string]bool{ids[rng.Intn(len(ids))]: true}
			case 4:
				// A launch fails for a job, waiting or not.
				o, id := offers[rng.Intn(len(offers))], ids[rng.Intn(len(ids))]
				c.scaleSt.memory.Fail(o, id, now)
				twin.Fail(o, id, now)
			}
			got := c.pendingInputLocked(readied)
			if cycle > 0 && len(readied) == 0 && len(got) > 0 && len(c.scaleSt.pendingIn.list) > 0 && &got[0] == &c.scaleSt.pendingIn.list[0] {
				kept++
			}
			if diff := cmp.Diff(buildPendingInput(c.lastPlan, c.st, readied), got); diff != "" {
				t.Fatalf("world %d, cycle %d: the kept pending jobs differ from those built afresh (-fresh +kept):\n%s", world, cycle, diff)
			}
			g := c.scaleSt.memory.Gen()
			c.forgetJobsLocked()
			if c.scaleSt.memory.Gen() == g {
				forgotSkipped++
			}
			twin.ForgetJobs(func(id string) bool {
				j, ok := c.st.Job(id)
				return ok && (j.State == model.JobQueued || j.State == model.JobAdmitted || j.State == model.JobProvisioning)
			})
			if diff := cmp.Diff(twin.JobLast, c.scaleSt.memory.JobLast); diff != "" {
				t.Fatalf("world %d, cycle %d: the memory's jobs differ from a memory that forgets every cycle (-twin +kept):\n%s", world, cycle, diff)
			}
		}
	}
	t.Logf("%d cycles kept the last list, %d forgot nothing, %d jobs changed in place", kept, forgotSkipped, inPlace)
	if kept == 0 || forgotSkipped == 0 || inPlace == 0 {
		t.Error("the runs do not exercise what is kept")
	}
}
