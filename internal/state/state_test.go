package state

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestLiveAttemptsOn holds the per-node index to LiveAttempts through
// placement, replacement, a new attempt of the same job and the end.
func TestLiveAttemptsOn(t *testing.T) {
	t.Parallel()
	attempt := func(job string, n int, st model.AttemptState, nodes ...string) *model.Attempt {
		a := &model.Attempt{ID: model.AttemptID(job, n), JobID: job, State: st}
		for i, node := range nodes {
			a.Replicas = append(a.Replicas, model.Replica{Rank: i, NodeID: node, State: st})
		}
		return a
	}
	on := func(s *State, node string) []string {
		var ids []string
		s.LiveAttemptsOn(node, func(a *model.Attempt) bool { ids = append(ids, a.ID); return true })
		slices.Sort(ids)
		return ids
	}
	s := New()
	s.PutAttempt(attempt("j1", 1, model.AttemptRunning, "n1", "n2"))
	s.PutAttempt(attempt("j2", 1, model.AttemptRunning, "n1"))
	s.PutAttempt(attempt("j2", 1, model.AttemptRunning, "n2")) // replaced: moved to n2
	steps := []struct {
		name string
		put  *model.Attempt
		want map[string][]string
	}{
		{"placed", nil, map[string][]string{"n1": {"j1-a1"}, "n2": {"j1-a1", "j2-a1"}}},
		{"j1 ends", attempt("j1", 1, model.AttemptSucceeded, "n1", "n2"), map[string][]string{"n2": {"j2-a1"}}},
		{"j2's second attempt", attempt("j2", 2, model.AttemptRunning, "n3"), map[string][]string{"n3": {"j2-a2"}}},
		{"j2's first attempt ends late", attempt("j2", 1, model.AttemptFailed, "n2"), map[string][]string{"n3": {"j2-a2"}}},
	}
	for _, st := range steps {
		if st.put != nil {
			s.PutAttempt(st.put)
		}
		got := map[string][]string{}
		for _, n := range []string{"n1", "n2", "n3"} {
			if ids := on(s, n); ids != nil {
				got[n] = ids
			}
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: attempts by node (-want +got):\n%s", st.name, diff)
		}
		var live []string
		for _, a := range s.LiveAttempts() {
			live = append(live, a.ID)
		}
		var indexed []string
		for _, ids := range got {
			for _, id := range ids {
				if !slices.Contains(indexed, id) {
					indexed = append(indexed, id)
				}
			}
		}
		slices.Sort(indexed)
		if diff := cmp.Diff(live, indexed); diff != "" {
			t.Errorf("%s: index and LiveAttempts differ (-live +indexed):\n%s", st.name, diff)
		}
	}
}

// TestShapeKeyIgnoresUniqueLabels: labels that name one node (address,
// instance id, hostname, the unique. namespace) leave nodes
// interchangeable; labels that describe a node do not.
func TestShapeKeyIgnoresUniqueLabels(t *testing.T) {
	t.Parallel()
	base := func(labels map[string]string) *model.Node {
		return &model.Node{ID: "n", Provider: "static", Region: "r1", State: model.NodeReady, Labels: labels,
			GPUs: []model.GPU{{Index: 0, Model: "H100", Memory: 80 * model.GiB}}}
	}
	ref := ShapeKey(base(map[string]string{"team": "a"}))
	tests := map[string]struct {
		labels map[string]string
		same   bool
	}{
		"address":             {map[string]string{"team": "a", LabelAddress: "10.0.0.2:7070"}, true},
		"instance id":         {map[string]string{"team": "a", model.LabelInstance: "i-0abc"}, true},
		"hostname":            {map[string]string{"team": "a", LabelHostname: "gpu-17"}, true},
		"kubernetes":          {map[string]string{"team": "a", "kubernetes.io/hostname": "gpu-17"}, true},
		"unique namespace":    {map[string]string{"team": "a", "unique.serial": "SN123"}, true},
		"prefixed unique":     {map[string]string{"team": "a", "example.com/unique.slot": "4"}, true},
		"descriptive differs": {map[string]string{"team": "b"}, false},
		"not unique by name":  {map[string]string{"team": "a", "uniqueness": "x"}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ShapeKey(base(tc.labels)) == ref; got != tc.same {
				t.Errorf("same shape = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestLiveAttemptsStaySorted: LiveAttempts, kept in order as attempts
// change rather than sorted, holds exactly the live attempts, by id,
// through random starts, replacements, new attempts and ends.
func TestLiveAttemptsStaySorted(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	s := New()
	states := []model.AttemptState{model.AttemptStarting, model.AttemptRunning, model.AttemptSucceeded, model.AttemptFailed}
	for step := range 3000 {
		job := fmt.Sprintf("j%d", rng.Intn(60))
		a := &model.Attempt{ID: model.AttemptID(job, 1+rng.Intn(3)), JobID: job, State: states[rng.Intn(len(states))]}
		a.Replicas = []model.Replica{{NodeID: fmt.Sprintf("n%d", rng.Intn(5)), State: a.State}}
		s.PutAttempt(a)
		var want []string
		s.EachLiveAttempt(func(a *model.Attempt) { want = append(want, a.ID) })
		slices.Sort(want)
		var got []string
		for _, a := range s.LiveAttempts() {
			if cur, ok := s.Attempt(a.ID); !ok || cur != a {
				t.Fatalf("step %d: LiveAttempts holds %s, not the stored record", step, a.ID)
			}
			got = append(got, a.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: LiveAttempts %v, want %v", step, got, want)
		}
	}
}

// TestNodeStateGen moves with a new node and a state change only.
func TestNodeStateGen(t *testing.T) {
	t.Parallel()
	s := New()
	g0 := s.NodeStateGen()
	s.PutNode(&model.Node{ID: "n1", State: model.NodeReady})
	g1 := s.NodeStateGen()
	if g1 == g0 {
		t.Fatal("a new node left NodeStateGen as it was")
	}
	s.PutNode(&model.Node{ID: "n1", State: model.NodeReady, Labels: map[string]string{"a": "b"}})
	if s.NodeStateGen() != g1 {
		t.Fatal("a put without a state change moved NodeStateGen")
	}
	s.PutNode(&model.Node{ID: "n1", State: model.NodeDraining})
	if s.NodeStateGen() == g1 {
		t.Fatal("a state change left NodeStateGen as it was")
	}
}
