package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// TestDeclaredPriorityClasses: the fleet declares classes (name, value,
// preemptible) the scheduler orders and preempts by, and a job that could
// preempt only non-preemptible work is told so (issue #14 item 5).
func TestDeclaredPriorityClasses(t *testing.T) {
	declared := []model.PriorityClass{
		{Name: "protected", Value: 50, Preemptible: false}, // below normal, yet never a victim
		{Name: "urgent", Value: 5000, Preemptible: true},
	}
	type want struct {
		Victims []string
		Codes   []string // the preemptor's reason codes
	}
	tests := map[string]struct {
		victim, preemptor string
		want              want
	}{
		"a declared non-preemptible class is never a victim": {
			victim: "protected", preemptor: "high",
			want: want{Codes: []string{ReasonGPUsFree, ReasonNonPreemptible, ReasonNoEstimate}},
		},
		"a declared preemptible class above high preempts it": {
			victim: "high", preemptor: "urgent",
			want: want{Victims: []string{"v"}, Codes: []string{"", ReasonGPUsFree}}, // preempting …; the node has no GPU free
		},
		"and is preempted by critical": {
			victim: "urgent", preemptor: "critical",
			want: want{Victims: []string{"v"}, Codes: []string{"", ReasonGPUsFree}}, // preempting …; the node has no GPU free
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
			w.st.SetPriorityClasses(declared)
			w.run(job("v", 1, 8, priority(tc.victim)), now.Add(-time.Minute), "a", 0, 1, 2, 3, 4, 5, 6, 7)
			w.submit(job("p", 2, 8, priority(tc.preemptor)))
			plan := Schedule(w.st.Snapshot(), nil, now, 1)
			var got want
			for _, pe := range plan.Preemptions {
				got.Victims = append(got.Victims, pe.JobID)
			}
			for _, r := range verdictOf(plan, "p").Reasons {
				got.Codes = append(got.Codes, r.Code)
				if r.Code == ReasonNonPreemptible && !strings.Contains(r.Message, "would preempt only non-preemptible work") {
					t.Errorf("reason %q", r.Message)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
