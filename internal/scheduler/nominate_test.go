package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// TestNominatedGPUsGoToThePreemptor: GPUs freed by preemption for a job
// are withheld from jobs ahead of it until the nomination expires.
func TestNominatedGPUsGoToThePreemptor(t *testing.T) {
	tests := map[string]struct {
		expires time.Time
		want    []string
	}{
		"held for the preemptor": {expires: now.Add(time.Minute), want: []string{"preemptor"}},
		"expired: first in line": {expires: now, want: []string{"first"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld([]*model.Node{node("n1", "H100", 4, 80*model.GiB)})
			w.submit(job("first", 1, 4), job("preemptor", 2, 4))
			w.st.Nominate(state.Nomination{JobID: "preemptor", Expires: tc.expires, GPUs: []state.NodeGPUs{{NodeID: "n1", GPUs: []int{0, 1, 2, 3}}}})
			plan := Schedule(w.st.Snapshot(), nil, now, 1)
			if diff := cmp.Diff(tc.want, boundIDs(plan)); diff != "" {
				t.Errorf("bound (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNominationEndsWhenTheJobLeavesTheQueue: binding (or cancelling) the
// preemptor drops its nomination.
func TestNominationEndsWhenTheJobLeavesTheQueue(t *testing.T) {
	w := newWorld([]*model.Node{node("n1", "H100", 4, 80*model.GiB)})
	j := job("p", 1, 4)
	w.submit(j)
	w.st.Nominate(state.Nomination{JobID: "p", Expires: now.Add(time.Hour), GPUs: []state.NodeGPUs{{NodeID: "n1", GPUs: []int{0}}}})
	if got := len(w.st.Snapshot().Nominations); got != 1 {
		t.Fatalf("nominations = %d, want 1", got)
	}
	w.run(j, now, "n1", 0, 1, 2, 3)
	if got := w.st.Snapshot().Nominations; len(got) != 0 {
		t.Fatalf("nominations after binding = %+v, want none", got)
	}
}

// TestSeedBreaksQueueTies: queues of equal fair share go in an order the
// seed picks, the same for the same seed.
func TestSeedBreaksQueueTies(t *testing.T) {
	firsts := map[string]bool{}
	for seed := int64(0); seed < 16; seed++ {
		w := newWorld([]*model.Node{node("n1", "H100", 1, 80*model.GiB)}, queue("a", "", 1), queue("b", "", 1))
		w.submit(job("ja", 1, 1, inQueue("a")), job("jb", 2, 1, inQueue("b")))
		snap := w.st.Snapshot()
		got := boundIDs(Schedule(snap, nil, now, seed))
		if again := boundIDs(Schedule(snap, nil, now, seed)); !cmp.Equal(got, again) {
			t.Fatalf("seed %d: %v then %v", seed, got, again)
		}
		firsts[got[0]] = true
	}
	if len(firsts) != 2 {
		t.Fatalf("across 16 seeds the tie always went to %v", firsts)
	}
}
