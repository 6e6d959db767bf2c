package state

import (
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
