package scheduler

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

func cpu(c float64) jobOpt            { return func(j *model.Job) { j.Spec.Resources.CPU = c } }
func memory(m model.Bytes) jobOpt     { return func(j *model.Job) { j.Spec.Resources.Memory = m } }
func fellBack(preemptions int) jobOpt { return func(j *model.Job) { j.Preemptions = preemptions } }

// TestVerdictsAreKeyedByWhatDecidesThem: jobs are filtered once per fit
// key, so a fact a filter reads but the key lacks lets one job's verdict
// become another's (issue #14 item 2: a {gpus: 1, cpu: 1000} job made
// plain 1-GPU jobs wait with 7 GPUs free, showing its CPU reason).
func TestVerdictsAreKeyedByWhatDecidesThem(t *testing.T) {
	small := func() *model.Node {
		n := node("a", "H100", 8, 80*model.GiB)
		n.CPU, n.Memory = 2, 16*model.GiB
		return n
	}
	spotNode := func() *model.Node {
		n := small()
		n.CapacityType = model.Spot
		return n
	}
	onDemandAfter := func(j *model.Job) {
		j.Spec.Spot = model.SpotAllowed
		j.Spec.Retries.OnDemandAfterPreemptions = 1
	}
	type want struct {
		Bound    []string
		Messages map[string][]string // job → its reasons' messages
	}
	tests := map[string]struct {
		node *model.Node
		jobs []*model.Job
		want want
	}{
		"cpu": {
			node: small(),
			jobs: []*model.Job{job("greedy", 1, 1, cpu(1000)), job("plain", 2, 1)},
			want: want{Bound: []string{"plain"}, Messages: map[string][]string{"greedy": {"node has 2.0 CPUs, job needs 1000.0 per replica"}}},
		},
		"memory": {
			node: small(),
			jobs: []*model.Job{job("greedy", 1, 1, memory(1024*model.GiB)), job("plain", 2, 1)},
			want: want{Bound: []string{"plain"}, Messages: map[string][]string{"greedy": {"node has 16Gi memory, job needs 1Ti per replica"}}},
		},
		"spot fallback is the job's own": {
			node: spotNode(),
			jobs: []*model.Job{job("fell-back", 1, 1, onDemandAfter, fellBack(1)), job("never", 2, 1, spot(model.SpotNever))},
			want: want{Messages: map[string][]string{
				"fell-back": {"node is spot and the job falls back to on-demand (retries.onDemandAfterPreemptions)"},
				"never":     {"node is spot and the job does not allow spot"},
			}},
		},
		// The deadline rule reads the job's deadline, runtime and
		// checkpoints: a job with room to spare is not refused for a
		// neighbour's tight deadline, nor the reverse.
		"deadline risk is the job's own": {
			node: riskyNode(0.05),
			jobs: []*model.Job{job("tight", 1, 1, deadlineIn(4*time.Hour+10*time.Minute, 4*time.Hour, 30*time.Minute)), job("loose", 2, 1, deadlineIn(48*time.Hour, 4*time.Hour, 30*time.Minute))},
			want: want{Bound: []string{"loose"}, Messages: map[string][]string{
				"tight": {"node is spot at 0.05 interruptions per instance-hour: the job finishes by limits.deadline with probability 81%, below the 95% spot needs (a later deadline, a shorter checkpoint.interval or checkpoint.restart raises it)"},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan := Schedule(snapshot([]*model.Node{tc.node}, tc.jobs), nil, now, 1)
			got := want{Bound: boundIDs(plan), Messages: map[string][]string{}}
			for id, v := range plan.Verdicts.All() {
				for _, r := range v.Reasons {
					got.Messages[id] = append(got.Messages[id], r.Message)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCapacityReasonsSayWhatIsShort: a node with enough GPUs free that
// still cannot take the job says whether CPU, memory or a whole NVLink
// domain is short, not all three at once (issue #14 item 4).
func TestCapacityReasonsSayWhatIsShort(t *testing.T) {
	tests := map[string]struct {
		running *model.Job
		gpus    []int
		job     *model.Job
		want    []string
	}{
		"cpu": {
			running: job("r", 1, 1, cpu(60)), gpus: []int{0},
			job:  job("j", 2, 1, cpu(8)),
			want: []string{"nodes with enough GPUs free have at most 4.0 CPUs free, job needs 8.0 per replica"},
		},
		"memory": {
			running: job("r", 1, 1, memory(500*model.GiB)), gpus: []int{0},
			job:  job("j", 2, 1, memory(64*model.GiB)),
			want: []string{"nodes with enough GPUs free have at most 12Gi memory free, job needs 64Gi per replica"},
		},
		"nvlink": {
			running: job("r", 1, 2), gpus: []int{0, 4},
			job:  job("j", 2, 4, nvlink),
			want: []string{"at most 3 GPUs are free inside one NVLink domain of a node, job needs 4 over nvlink"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld([]*model.Node{node("a", "H100", 8, 80*model.GiB)})
			w.run(tc.running, now.Add(-time.Minute), "a", tc.gpus...)
			w.submit(tc.job)
			plan := Schedule(w.st.Snapshot(), nil, now, 1)
			var got []string
			for _, r := range verdictOf(plan, "j").Reasons {
				if r.Scope == "node/a" {
					got = append(got, r.Message)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node reasons (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUniqueLabelsDoNotSplitClasses: nodes that differ only in a unique
// label (their address) form one class, and a job that selects one by it
// is matched to that node alone (issue #15, item 2).
func TestUniqueLabelsDoNotSplitClasses(t *testing.T) {
	t.Parallel()
	var nodes []*model.Node
	for _, id := range []string{"a", "b", "c"} {
		n := node(id, "H100", 8, 80*model.GiB)
		n.Labels = map[string]string{state.LabelAddress: id + ".example:7070", "team": "ml"}
		nodes = append(nodes, n)
	}
	selects := func(addr string) jobOpt {
		return func(j *model.Job) { j.Spec.NodeSelector = map[string]string{state.LabelAddress: addr, "team": "ml"} }
	}
	jobs := []*model.Job{
		job("big", 1, 9),
		job("pin", 2, 1, selects("c.example:7070")),
		job("pin-full", 3, 8, selects("c.example:7070")), // c has 7 left; a and b have 8
		job("ghost", 4, 1, selects("z.example:7070")),
		job("plain", 5, 1),
	}
	plan := Schedule(snapshot(nodes, jobs), nil, now, 1)
	type bound struct{ Job, Node string }
	var got []bound
	for _, b := range plan.Bindings {
		got = append(got, bound{b.JobID, b.Replicas[0].NodeID})
	}
	want := []bound{{"pin", "c"}, {"plain", "c"}} // plain packs onto c, the partly used node
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bindings (-want +got):\n%s", diff)
	}
	codes := func(id string) []string {
		var out []string
		for _, r := range verdictOf(plan, id).Reasons {
			out = append(out, r.Scope+" "+r.Code)
		}
		return out
	}
	for id, want := range map[string][]string{
		"big":      {"node/c gpu-count", "nodes(2) /local 8xH100 gpu-count"},
		"pin-full": {"nodes(2) /local 8xH100 node-selector", "node/c gpus-free", "job no-estimate"},
		"ghost":    {"node/c node-selector", "nodes(2) /local 8xH100 node-selector"},
	} {
		if diff := cmp.Diff(want, codes(id)); diff != "" {
			t.Errorf("%s reasons (-want +got):\n%s", id, diff)
		}
	}
}
