package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func readsData(src string) jobOpt {
	return func(j *model.Job) {
		j.Project = "nlp"
		j.Spec.Data = []model.DataSource{{Source: src, Path: "data/", Mode: model.DataReadOnly}}
	}
}

func digestOf(t *testing.T, project, src string) string {
	t.Helper()
	loc, err := model.ParseDataSource(src)
	if err != nil {
		t.Fatal(err)
	}
	return model.DataDigest(project, loc)
}

func TestDataLocalNodesArePreferred(t *testing.T) {
	t.Parallel()
	d := digestOf(t, "nlp", "storage:lake/imagenet")
	other := digestOf(t, "nlp", "storage:lake/other")
	tests := map[string]struct {
		nodes    []*model.Node
		held     map[string]map[string]bool
		job      *model.Job
		wantNode string
		wantCode string
	}{
		"equal nodes: the one holding the data": {
			nodes:    []*model.Node{node("a", "H100", 8, 80*model.GiB), node("b", "H100", 8, 80*model.GiB), node("c", "H100", 8, 80*model.GiB)},
			held:     map[string]map[string]bool{"b": {d: true}},
			job:      job("j", 1, 8, readsData("storage:lake/imagenet")),
			wantNode: "b", wantCode: ScoreData,
		},
		"a worse fit holding the data beats an exact fit without it": {
			nodes:    []*model.Node{node("a", "H100", 1, 80*model.GiB), node("b", "H100", 8, 80*model.GiB)},
			held:     map[string]map[string]bool{"b": {d: true}},
			job:      job("j", 1, 1, readsData("storage:lake/imagenet")),
			wantNode: "b", wantCode: ScoreData,
		},
		"other data held elsewhere does not count": {
			nodes:    []*model.Node{node("a", "H100", 1, 80*model.GiB), node("b", "H100", 8, 80*model.GiB)},
			held:     map[string]map[string]bool{"b": {other: true}},
			job:      job("j", 1, 1, readsData("storage:lake/imagenet")),
			wantNode: "a", wantCode: ScoreData,
		},
		"another project's copy does not count": {
			nodes:    []*model.Node{node("a", "H100", 1, 80*model.GiB), node("b", "H100", 8, 80*model.GiB)},
			held:     map[string]map[string]bool{"b": {digestOf(t, "vision", "storage:lake/imagenet"): true}},
			job:      job("j", 1, 1, readsData("storage:lake/imagenet")),
			wantNode: "a", wantCode: ScoreData,
		},
		"CPU job: the node holding the data": {
			nodes:    []*model.Node{node("a", "H100", 0, 0), node("b", "H100", 0, 0)},
			held:     map[string]map[string]bool{"b": {d: true}},
			job:      job("j", 1, 0, readsData("storage:lake/imagenet")),
			wantNode: "b", wantCode: ScoreData,
		},
		"no data: no reason": {
			nodes:    []*model.Node{node("a", "H100", 1, 80*model.GiB), node("b", "H100", 8, 80*model.GiB)},
			held:     map[string]map[string]bool{"b": {d: true}},
			job:      job("j", 1, 1),
			wantNode: "a",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			snap := snapshot(tc.nodes, []*model.Job{tc.job})
			snap.Datasets = tc.held
			plan := Schedule(snap, nil, now, 1)
			if len(plan.Bindings) != 1 {
				t.Fatalf("bindings %+v, verdicts %+v", plan.Bindings, plan.Verdicts.Map())
			}
			b := plan.Bindings[0]
			if got := b.Replicas[0].NodeID; got != tc.wantNode {
				t.Errorf("placed on %s, want %s", got, tc.wantNode)
			}
			var codes []string
			for _, r := range b.Reasons {
				codes = append(codes, r.Code)
			}
			var want []string
			if tc.wantCode != "" {
				want = []string{tc.wantCode}
			}
			if diff := cmp.Diff(want, codes); diff != "" {
				t.Errorf("reason codes (-want +got):\n%s\nreasons: %+v", diff, b.Reasons)
			}
		})
	}
}

func TestGangPrefersDataLocalNodes(t *testing.T) {
	t.Parallel()
	d := digestOf(t, "nlp", "s3://bucket/set")
	nodes := []*model.Node{node("a", "H100", 8, 80*model.GiB), node("b", "H100", 8, 80*model.GiB), node("c", "H100", 8, 80*model.GiB), node("d", "H100", 8, 80*model.GiB)}
	snap := snapshot(nodes, []*model.Job{job("j", 1, 8, replicas(2), readsData("s3://bucket/set"))})
	snap.Datasets = map[string]map[string]bool{"b": {d: true}, "d": {d: true}}
	plan := Schedule(snap, nil, now, 1)
	if len(plan.Bindings) != 1 {
		t.Fatalf("bindings %+v", plan.Bindings)
	}
	var got []string
	for _, r := range plan.Bindings[0].Replicas {
		got = append(got, r.NodeID)
	}
	if diff := cmp.Diff([]string{"b", "d"}, got); diff != "" {
		t.Errorf("gang nodes (-want +got):\n%s", diff)
	}
}

func TestDataScoreIsTheShareHeld(t *testing.T) {
	t.Parallel()
	held := map[string]bool{"x": true, "y": true}
	for want, ds := range map[float64][]string{0: {"z"}, 50: {"x", "z"}, 100: {"x", "y"}} {
		if got := dataScore(ds, held); got != want {
			t.Errorf("dataScore(%v) = %v, want %v", ds, got, want)
		}
	}
	if dataScore(nil, held) != 0 {
		t.Error("a job without data scored")
	}
}
