package scheduler

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func node(id, gpuModel string, gpus int, mem model.Bytes) *model.Node {
	n := &model.Node{ID: id, State: model.NodeReady, CPU: 64, Memory: 512 * model.GiB, Region: "local", CapacityType: model.Owned}
	for i := 0; i < gpus; i++ {
		group := 0
		if gpus > 4 && i >= gpus/2 {
			group = 1
		}
		n.GPUs = append(n.GPUs, model.GPU{Index: i, Model: gpuModel, Memory: mem, NVLinkGroup: group})
	}
	return n
}

type jobOpt func(*model.Job)

func job(id string, seq uint64, gpus float64, opts ...jobOpt) *model.Job {
	j := &model.Job{ID: id, Seq: seq, Version: 1, State: model.JobQueued,
		Spec: model.JobSpec{Replicas: 1, Resources: model.Resources{GPUs: gpus}, Run: model.RunSpec{Command: []string{"true"}}}}
	j.Spec.Default()
	for _, o := range opts {
		o(j)
	}
	return j
}

func replicas(n int) jobOpt          { return func(j *model.Job) { j.Spec.Replicas = n } }
func models(m ...string) jobOpt      { return func(j *model.Job) { j.Spec.Resources.GPU.Models = m } }
func minMem(b model.Bytes) jobOpt    { return func(j *model.Job) { j.Spec.Resources.GPU.MinMemory = b } }
func spot(p model.SpotPolicy) jobOpt { return func(j *model.Job) { j.Spec.Spot = p } }

func snapshot(nodes []*model.Node, jobs []*model.Job, live ...*model.Attempt) *state.Snapshot {
	st := state.New()
	for _, n := range nodes {
		st.PutNode(n)
	}
	for _, j := range jobs {
		st.PutJob(j)
	}
	for _, a := range live {
		st.PutAttempt(a)
	}
	return st.Snapshot()
}

func TestSchedule(t *testing.T) {
	h100 := func(id string) *model.Node { return node(id, "H100", 8, 80*model.GiB) }
	tests := map[string]struct {
		nodes    []*model.Node
		jobs     []*model.Job
		want     []Binding
		verdicts map[string][]string // job → substrings of its reasons
	}{
		"fifo first fit": {
			nodes: []*model.Node{h100("a")},
			jobs:  []*model.Job{job("j1", 1, 4), job("j2", 2, 4), job("j3", 3, 1)},
			want: []Binding{
				{JobID: "j1", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{0, 1, 2, 3}}}},
				{JobID: "j2", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{4, 5, 6, 7}}}},
			},
			verdicts: map[string][]string{"j3": {"0 matching GPUs free"}},
		},
		"a job that does not fit does not block later ones": {
			nodes:    []*model.Node{h100("a")},
			jobs:     []*model.Job{job("big", 1, 16), job("small", 2, 2)},
			want:     []Binding{{JobID: "small", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{0, 1}}}}},
			verdicts: map[string][]string{"big": {"node has 8 GPUs, job needs 16"}},
		},
		"model and memory constraints": {
			nodes: []*model.Node{node("l4", "L4", 4, 24*model.GiB), node("a100", "A100", 8, 40*model.GiB), h100("h")},
			jobs: []*model.Job{
				job("wants-h100", 1, 2, models("H100")),
				job("wants-60g", 2, 1, minMem(60*model.GiB)),
				job("wants-a10", 3, 1, models("A10")),
			},
			want: []Binding{
				{JobID: "wants-h100", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "h", GPUs: []int{0, 1}}}},
				{JobID: "wants-60g", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "h", GPUs: []int{2}}}},
			},
			verdicts: map[string][]string{"wants-a10": {"node/l4 GPU model L4 is not in [A10]", "node/h GPU model H100"}},
		},
		"gang is all or nothing": {
			nodes: []*model.Node{h100("a"), h100("b")},
			jobs:  []*model.Job{job("gang3", 1, 8, replicas(3)), job("gang2", 2, 8, replicas(2))},
			want: []Binding{{JobID: "gang2", JobVersion: 1, Replicas: []Placement{
				{Rank: 0, NodeID: "a", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}},
				{Rank: 1, NodeID: "b", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}},
			}}},
			verdicts: map[string][]string{"gang3": {"only 2 of 3 replicas fit"}},
		},
		"replica stays inside one NVLink group": {
			nodes: []*model.Node{h100("a")},
			jobs:  []*model.Job{job("one", 1, 1), job("four", 2, 4)},
			want: []Binding{
				{JobID: "one", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{0}}}},
				{JobID: "four", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{4, 5, 6, 7}}}},
			},
		},
		"spot policy": {
			nodes:    []*model.Node{func() *model.Node { n := h100("s"); n.CapacityType = model.Spot; return n }()},
			jobs:     []*model.Job{job("never", 1, 1), job("required", 2, 1, spot(model.SpotRequired))},
			want:     []Binding{{JobID: "required", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "s", GPUs: []int{0}}}}},
			verdicts: map[string][]string{"never": {"does not allow spot"}},
		},
		"cpu-only job needs no GPU": {
			nodes: []*model.Node{node("cpu", "", 0, 0)},
			jobs:  []*model.Job{job("hello", 1, 0)},
			want:  []Binding{{JobID: "hello", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "cpu", GPUs: nil}}}},
		},
		"fraction of a GPU is a verdict, not an error": {
			nodes:    []*model.Node{h100("a")},
			jobs:     []*model.Job{job("quarter", 1, 0.25)},
			verdicts: map[string][]string{"quarter": {"shareable"}},
		},
		"no nodes": {
			jobs:     []*model.Job{job("lonely", 1, 1)},
			verdicts: map[string][]string{"lonely": {"no nodes are registered"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan := Schedule(snapshot(tc.nodes, tc.jobs), nil, now, 1)
			if diff := cmp.Diff(tc.want, plan.Bindings); diff != "" {
				t.Errorf("bindings (-want +got):\n%s", diff)
			}
			for jobID, wants := range tc.verdicts {
				v, ok := plan.Verdicts.Get(jobID)
				if !ok {
					t.Errorf("no verdict for %s", jobID)
					continue
				}
				text := fmt.Sprint(v.Reasons)
				for _, w := range wants {
					if !strings.Contains(text, w) {
						t.Errorf("verdict for %s = %s, want it to mention %q", jobID, text, w)
					}
				}
			}
			if plan.Verdicts.Len() != len(tc.verdicts) {
				t.Errorf("verdicts for %d jobs, want %d: %v", plan.Verdicts.Len(), len(tc.verdicts), plan.Verdicts.Map())
			}
		})
	}
}

func TestScheduleRespectsHeldGPUs(t *testing.T) {
	n := node("a", "H100", 8, 80*model.GiB)
	running := job("running", 1, 6)
	running.State = model.JobRunning
	a := &model.Attempt{ID: "running-a1", JobID: "running", State: model.AttemptRunning,
		Replicas: []model.Replica{{NodeID: "a", GPUs: []int{0, 1, 2, 3, 4, 5}, State: model.AttemptRunning}}}
	plan := Schedule(snapshot([]*model.Node{n}, []*model.Job{running, job("next", 2, 2), job("late", 3, 1)}, a), nil, now, 1)
	want := []Binding{{JobID: "next", JobVersion: 1, Replicas: []Placement{{Rank: 0, NodeID: "a", GPUs: []int{6, 7}}}}}
	if diff := cmp.Diff(want, plan.Bindings); diff != "" {
		t.Fatalf("bindings (-want +got):\n%s", diff)
	}
}

func TestCandidatesRankOffersByTotalPrice(t *testing.T) {
	offers := []model.Offer{
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 55},
		{Provider: "aws", Region: "us-east-1", InstanceType: "p5.48xlarge", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.Spot, PricePerHour: 20},
		{Provider: "gcp", Region: "europe-west4", InstanceType: "a3-highgpu-8g", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 50},
		{Provider: "gcp", Region: "us-central1", InstanceType: "g2-standard-4", GPU: "L4", GPUCount: 1, GPUMemory: 24 * model.GiB, CapacityType: model.OnDemand, PricePerHour: 0.7},
	}
	j := job("train", 1, 8, replicas(2), models("H100"))
	j.Spec.Regions.Allow = []string{"us-*"}
	plan := Schedule(snapshot(nil, []*model.Job{j}), offers, now, 1)
	if len(plan.Candidates) != 1 {
		t.Fatalf("candidates = %d, want 1", len(plan.Candidates))
	}
	c := plan.Candidates[0]
	if c.Instances != 2 || len(c.Offers) != 1 || c.Offers[0].CapacityType != model.OnDemand || c.Offers[0].Region != "us-east-1" {
		t.Fatalf("candidate = %+v; want 2 on-demand p5 in us-east-1 (spot not allowed, europe excluded)", c)
	}
}

// TestScheduleInvariants checks, over random clusters and queues, that a plan
// never binds a GPU twice or to a holder, never splits a gang, never places a
// GPU of the wrong model, and is the same for the same input.
func TestScheduleInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	gpuModels := []string{"H100", "A100", "L4"}
	for round := 0; round < 200; round++ {
		var nodes []*model.Node
		for i := 0; i < 1+rng.Intn(12); i++ {
			n := node(fmt.Sprintf("n%02d", i), gpuModels[rng.Intn(3)], []int{0, 1, 2, 4, 8}[rng.Intn(5)], model.Bytes(24+rng.Intn(60))*model.GiB)
			if rng.Intn(6) == 0 {
				n.State = model.NodeDraining
			}
			nodes = append(nodes, n)
		}
		var jobs []*model.Job
		for i := 0; i < rng.Intn(40); i++ {
			opts := []jobOpt{replicas(1 + rng.Intn(3))}
			if rng.Intn(2) == 0 {
				opts = append(opts, models(gpuModels[rng.Intn(3)]))
			}
			jobs = append(jobs, job(fmt.Sprintf("j%02d", i), uint64(i+1), float64(rng.Intn(9)), opts...))
		}
		snap := snapshot(nodes, jobs)
		plan := Schedule(snap, nil, now, int64(round))
		if again := Schedule(snap, nil, now, int64(round)); !cmp.Equal(plan, again) {
			t.Fatalf("round %d: plan not deterministic", round)
		}
		byID := map[string]*model.Node{}
		for _, n := range nodes {
			byID[n.ID] = n
		}
		jobByID := map[string]*model.Job{}
		for _, j := range jobs {
			jobByID[j.ID] = j
		}
		used := map[string]bool{}
		for _, b := range plan.Bindings {
			j := jobByID[b.JobID]
			if len(b.Replicas) != j.Spec.Replicas {
				t.Fatalf("round %d: %s bound %d of %d replicas", round, j.ID, len(b.Replicas), j.Spec.Replicas)
			}
			if _, pending := plan.Verdicts.Get(j.ID); pending {
				t.Fatalf("round %d: %s both bound and pending", round, j.ID)
			}
			for _, p := range b.Replicas {
				n := byID[p.NodeID]
				if n.State != model.NodeReady {
					t.Fatalf("round %d: %s placed on %s node", round, j.ID, n.State)
				}
				if len(p.GPUs) != int(j.Spec.Resources.GPUs) {
					t.Fatalf("round %d: %s got %d GPUs, wants %g", round, j.ID, len(p.GPUs), j.Spec.Resources.GPUs)
				}
				for _, g := range p.GPUs {
					key := fmt.Sprintf("%s/%d", p.NodeID, g)
					if used[key] {
						t.Fatalf("round %d: GPU %s bound twice", round, key)
					}
					used[key] = true
					if !modelAllowed(j.Spec.Resources.GPU.Models, n.GPUs[g].Model) {
						t.Fatalf("round %d: %s got a %s", round, j.ID, n.GPUs[g].Model)
					}
				}
			}
		}
		if len(plan.Bindings)+plan.Verdicts.Len() != len(jobs) {
			t.Fatalf("round %d: %d bound + %d pending != %d jobs", round, len(plan.Bindings), plan.Verdicts.Len(), len(jobs))
		}
	}
}
