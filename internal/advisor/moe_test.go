package advisor

import (
	"math"
	"testing"
)

// deepSeekV3 is DeepSeek-V3's published architecture (Liu et al. 2024,
// DeepSeek-V3 Technical Report §4.2), MLA expressed as full heads.
func deepSeekV3() Profile {
	return Profile{Task: PreTrain, Precision: FP8, Tokens: 1e12, SequenceLength: 4096, GlobalBatch: 15360,
		Model: Model{Layers: 61, Hidden: 7168, FFN: 18432, Heads: 128, Vocab: 129280,
			Experts: 256, ActiveExperts: 8, SharedExperts: 1, ExpertFFN: 2048, DenseLayers: 3, RouteNodes: 4}}
}

// The derived counts match the report's 671B total and 37B activated
// parameters (the MLA approximation is within a few percent).
func TestMoEParameterCounts(t *testing.T) {
	t.Parallel()
	w := mustResolve(t, deepSeekV3())
	if rel := math.Abs(w.params/671e9 - 1); rel > 0.02 {
		t.Errorf("total parameters %.4g, want 671e9 within 2%%", w.params)
	}
	if rel := math.Abs(w.active/37e9 - 1); rel > 0.06 {
		t.Errorf("active parameters %.4g, want 37e9 within 6%%", w.active)
	}
	if w.routed < 0.95*w.params {
		t.Errorf("routed experts %.4g of %.4g: DeepSeek-V3 is almost all routed experts", w.routed, w.params)
	}
	// Mixtral: 46.7B total, 12.9B active (Jiang et al. 2024).
	mx := mustResolve(t, Profile{Preset: "mixtral-8x7b", Task: PreTrain, Tokens: 1e9})
	if rel := math.Abs(mx.active/12.9e9 - 1); rel > 0.02 {
		t.Errorf("mixtral active parameters %.4g, want 12.9e9", mx.active)
	}
}

// Expert parallelism splits only the routed experts, and ZeRO shards every
// state over dp whatever ep is.
func TestExpertParallelMemory(t *testing.T) {
	t.Parallel()
	w := mustResolve(t, deepSeekV3())
	base := Plan{Nodes: 256, GPUsPerNode: 8, TP: 1, PP: 16, DP: 128, ZeRO: 1, Recompute: RecomputeFull, MicroBatch: 1}
	ep := base
	ep.EP = 64
	m1, m64 := w.trainingMemory(base, 80*gib), w.trainingMemory(ep, 80*gib)
	wantWeights := 3 * ((w.params-w.routed)/16 + w.routed/(16*64))
	if math.Abs(m64.weights/wantWeights-1) > 1e-9 {
		t.Errorf("ep64 weights %.4g, want %.4g", m64.weights, wantWeights)
	}
	if m1.weights < 20*m64.weights { // the replicated attention, shared experts and embeddings remain
		t.Errorf("ep64 should cut the weights over 20x: ep1 %.3g, ep64 %.3g", m1.weights, m64.weights)
	}
	if math.Abs(m1.optim/m64.optim-1) > 1e-9 {
		t.Errorf("ZeRO-1 optimizer states differ with ep: %.4g vs %.4g", m1.optim, m64.optim)
	}
}

// The all-to-all grows when the EP group leaves the node, shrinks with
// node-limited routing, and overlap hides what compute covers.
func TestExpertAllToAll(t *testing.T) {
	t.Parallel()
	w := mustResolve(t, deepSeekV3())
	hw := &hardware{intra: 450e9 * linkEfficiency, inter: 400e9 * netEfficiency}
	plan := func(ep int, overlap bool) Plan {
		return Plan{Nodes: 256, GPUsPerNode: 8, TP: 1, PP: 16, DP: 128, EP: ep, OverlapExpertComm: overlap, ZeRO: 1, MicroBatch: 1}
	}
	inNode, _ := w.expertAllToAll(plan(8, false), hw, 120, 10)
	acrossNodes, exposed := w.expertAllToAll(plan(64, false), hw, 120, 10)
	if !(acrossNodes > 3*inNode) || exposed != acrossNodes {
		t.Errorf("ep8 (one node) %.3gs, ep64 (8 nodes) %.3gs exposed %.3gs: crossing nodes should cost more and all be exposed without overlap", inNode, acrossNodes, exposed)
	}
	unlimited := w
	unlimited.arch.RouteNodes = 0
	free, _ := unlimited.expertAllToAll(plan(64, false), hw, 120, 10)
	if !(free > acrossNodes) {
		t.Errorf("node-limited routing should send less: unlimited %.3gs, 4 nodes %.3gs", free, acrossNodes)
	}
	total, hidden := w.expertAllToAll(plan(64, true), hw, 120, 1e6)
	if total != acrossNodes || hidden != 0 {
		t.Errorf("overlap with ample compute: total %.3gs exposed %.3gs, want %.3gs and 0", total, hidden, acrossNodes)
	}
	if tot, exp := w.expertAllToAll(plan(0, false), hw, 120, 10); tot != 0 || exp != 0 {
		t.Errorf("no expert parallelism, no all-to-all: %.3g %.3g", tot, exp)
	}
}

// A pinned ep must divide the experts and dp, and needs an MoE.
func TestExpertParallelPinValidation(t *testing.T) {
	t.Parallel()
	p := deepSeekV3()
	p.Pin = Pin{EP: 3}
	if fe := p.Validate(); len(fe) == 0 {
		t.Error("ep 3 does not divide 256 experts, but validated")
	}
	p.Pin = Pin{EP: 8, DP: 12}
	if fe := p.Validate(); len(fe) == 0 {
		t.Error("ep 8 does not divide dp 12, but validated")
	}
	d := Profile{Preset: "llama-3-8b", Task: PreTrain, Tokens: 1e9, Pin: Pin{EP: 2}}
	if fe := d.Validate(); len(fe) == 0 {
		t.Error("ep on a dense model validated")
	}
	d = Profile{Preset: "llama-3-8b", Task: PreTrain, Tokens: 1e9, Model: Model{ExpertFFN: 1024}}
	if fe := d.Validate(); len(fe) == 0 {
		t.Error("expertFFN on a dense model validated")
	}
}

// Models whose heads·headDim differs from the hidden size: the derived
// counts match the published totals and activated parameters (Qwen3
// model cards: 30.5B/3.3B and 235B/22B; OpenAI gpt-oss model card:
// 116.8B total and 5.13B active, which leaves out the 0.58B input
// embedding that the advisor's active count keeps: 5.71B; attention sinks
// and biases left out).
func TestHeadDimParameterCounts(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		m             Model
		total, active float64
	}{
		"qwen3-30b-a3b":   {Model{Layers: 48, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, Vocab: 151936, Experts: 128, ActiveExperts: 8, ExpertFFN: 768, FFN: 6144}, 30.5e9, 3.3e9},
		"qwen3-235b-a22b": {Model{Layers: 94, Hidden: 4096, Heads: 64, KVHeads: 4, HeadDim: 128, Vocab: 151936, Experts: 128, ActiveExperts: 8, ExpertFFN: 1536, FFN: 12288}, 235e9, 22e9},
		"gpt-oss-120b":    {Model{Layers: 36, Hidden: 2880, Heads: 64, KVHeads: 8, HeadDim: 64, Vocab: 201088, Experts: 128, ActiveExperts: 4, ExpertFFN: 2880, FFN: 2880}, 116.8e9, 5.13e9 + 201088*2880},
	} {
		w := mustResolve(t, Profile{Model: c.m, Task: PreTrain, Tokens: 1e9})
		if rel := math.Abs(w.params/c.total - 1); rel > 0.03 {
			t.Errorf("%s: %.4g parameters, want %.4g within 3%%", name, w.params, c.total)
		}
		if rel := math.Abs(w.active/c.active - 1); rel > 0.05 {
			t.Errorf("%s: %.4g active, want %.4g within 5%%", name, w.active, c.active)
		}
	}
}

// Unpinned, the search finds the expert parallelism an MoE needs to fit:
// DeepSeek-V3 on 2,048 H100s at tp 1, pp 16 cannot hold its routed
// experts without it (672B/16 parameters per GPU), and the plan it picks
// pays an all-to-all for it.
func TestSearchChoosesExpertParallelism(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	p := deepSeekV3()
	p.Pin = Pin{GPUs: 2048, TP: 1, PP: 16}
	res, err := Rank(p, Options{Offers: c.Offers(), Accelerator: c.Accelerator, InstanceTypes: []string{"p5.48xlarge"}, MaxNodes: 256, Limit: 1, Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) == 0 {
		t.Fatalf("no plan for DeepSeek-V3 on 2048 H100s: %+v", res.Shortfall)
	}
	row := res.Rows[0]
	if row.Plan.EP < 2 || row.Timing.EPComm <= 0 {
		t.Errorf("plan %s: want expert parallelism with an all-to-all term (ep %d, all-to-all %.3gs)", row.Plan, row.Plan.EP, row.Timing.EPComm)
	}
	p.Pin.EP = 1
	res, err = Rank(p, Options{Offers: c.Offers(), Accelerator: c.Accelerator, InstanceTypes: []string{"p5.48xlarge"}, MaxNodes: 256, Limit: 1})
	if err == nil && len(res.Rows) > 0 && res.Rows[0].Plan.ZeRO < 3 {
		t.Errorf("ep pinned to 1 at tp 1, pp 16 should not fit without ZeRO-3: %s", res.Rows[0].Plan)
	}
}
