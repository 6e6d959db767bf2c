package scheduler

import (
	"fmt"
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestBlockedVerdictsShareBoundedReasons: a deep queue of blocked jobs of
// one shape on a fleet of many node groups gets one reason list, shared by
// every verdict and at most maxReasons long plus its "more" line, not a
// list per job with room for every group (issue #15, item 3: 2.85 GB at
// 100,000 jobs). A job placed in between changes what is free, and the
// jobs after it get a fresh list.
func TestBlockedVerdictsShareBoundedReasons(t *testing.T) {
	t.Parallel()
	const groups, blocked = 60, 200
	var nodes []*model.Node
	var live []*model.Attempt
	var jobs []*model.Job
	for i := 0; i < groups; i++ {
		n := node(fmt.Sprintf("n%02d", i), "H100", 8, 80*model.GiB)
		n.PricePerHour = float64(10 + i) // a group of its own
		nodes = append(nodes, n)
		r := job(fmt.Sprintf("r%02d", i), uint64(i+1), 7)
		r.State = model.JobRunning
		jobs = append(jobs, r)
		live = append(live, &model.Attempt{ID: r.ID + "-a1", JobID: r.ID, State: model.AttemptRunning, CreatedAt: now,
			Replicas: []model.Replica{{NodeID: n.ID, GPUs: []int{0, 1, 2, 3, 4, 5, 6}, State: model.AttemptRunning}}})
	}
	seq := uint64(groups)
	for i := 0; i < blocked; i++ {
		seq++
		g := 2.0
		if i == blocked/2 {
			g = 1 // fits, and takes n00's last GPU
		}
		jobs = append(jobs, job(fmt.Sprintf("j%03d", i), seq, g))
	}
	plan := Schedule(snapshot(nodes, jobs, live...), nil, now, 1)
	if len(plan.Bindings) != 1 {
		t.Fatalf("%d bindings, want the one-GPU job's", len(plan.Bindings))
	}
	backing, spare := map[*Reason]int{}, map[*Reason]int{}
	for i := 0; i < blocked; i++ {
		v, ok := plan.Verdicts.Get(fmt.Sprintf("j%03d", i))
		if i == blocked/2 {
			continue
		}
		if !ok || len(v.Reasons) == 0 {
			t.Fatalf("j%03d: no verdict reasons", i)
		}
		if len(v.Reasons) > maxReasons+2 {
			t.Errorf("j%03d: %d reasons, want at most %d", i, len(v.Reasons), maxReasons+2)
		}
		backing[&v.Reasons[0]]++
		spare[&v.Reasons[0]] = cap(v.Reasons) - len(v.Reasons)
	}
	for r, n := range backing {
		if n > 1 && spare[r] > 0 {
			t.Errorf("a reason list shared by %d verdicts has spare capacity %d: an append to one would write into the others", n, spare[r])
		}
	}
	// One list before the placement and one after (the reservation the
	// first blocked job makes changes what is free once more).
	if len(backing) > 3 {
		t.Errorf("%d distinct reason lists over %d blocked jobs of one shape, want at most 3", len(backing), blocked-1)
	}
}
