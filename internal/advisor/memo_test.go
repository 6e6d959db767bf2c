package advisor

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

// randomProfile is a training or serving workload drawn from the presets
// and two mixture-of-experts architectures, with random tasks, formats,
// sequence and batch sizes, and sometimes pins (plan degrees, ZeRO,
// recomputation, offload, micro-batch). Some draws are invalid; callers
// skip those.
func randomProfile(r *rand.Rand) Profile {
	var p Profile
	switch k := r.IntN(len(presets) + 2); {
	case k < len(presets):
		p.Preset = presets[k].Name
	case k == len(presets):
		p.Model = deepSeekV3().Model
	default: // a small fine-grained MoE (Qwen3-30B-A3B's shape)
		p.Model = Model{Layers: 48, Hidden: 2048, FFN: 6144, Heads: 32, KVHeads: 4, Vocab: 151936, Experts: 128, ActiveExperts: 8, ExpertFFN: 768}
	}
	p.Task = []Task{PreTrain, FullFineTune, LoRA, QLoRA, Serving, Serving}[r.IntN(6)]
	if p.Task == Serving {
		p.Precision = []Precision{"", BF16, FP8, INT4}[r.IntN(4)]
		p.Serving = ServingSpec{InputTokens: 100 + r.IntN(4000), OutputTokens: 50 + r.IntN(1000), Concurrency: 1 << r.IntN(9)}
		if r.IntN(3) == 0 {
			p.Serving.TargetLatency = model.Duration(time.Duration(1+r.IntN(30)) * time.Second)
		}
		return p
	}
	p.Tokens = float64(int64(1)<<(20+r.IntN(22))) * 1000
	if p.Task == PreTrain || p.Task == FullFineTune {
		p.Precision = []Precision{"", BF16, FP8, FP32}[r.IntN(4)]
	}
	if r.IntN(2) == 0 {
		p.SequenceLength = 512 << r.IntN(6)
	}
	if r.IntN(2) == 0 {
		p.GlobalBatch = 1 << r.IntN(12)
	}
	if r.IntN(4) == 0 {
		p.Attention = Eager
	}
	if r.IntN(4) == 0 {
		p.Parallelism = "data"
	}
	if r.IntN(4) == 0 {
		p.Framework = "megatron"
	}
	if r.IntN(5) == 0 {
		p.MicroBatch = 1 << r.IntN(3)
	}
	// Pins, each now and then.
	pin := &p.Pin
	if r.IntN(5) == 0 {
		pin.TP = 1 << r.IntN(4)
	}
	if r.IntN(5) == 0 {
		pin.PP = 1 << r.IntN(4)
		if pin.PP > 1 && r.IntN(2) == 0 {
			pin.VP = 2
		}
	}
	if r.IntN(6) == 0 {
		z := r.IntN(4)
		pin.ZeRO = &z
	}
	if r.IntN(6) == 0 {
		pin.Recompute = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}[r.IntN(3)]
	}
	if r.IntN(8) == 0 {
		off := r.IntN(2) == 0
		pin.OffloadOptimizer = &off
	}
	if r.IntN(10) == 0 {
		off := true
		pin.OffloadParams = &off
	}
	if r.IntN(6) == 0 {
		pin.EP = 1 << r.IntN(4)
	}
	if r.IntN(6) == 0 {
		pin.OverlapExpertComm = true
	}
	if r.IntN(8) == 0 {
		pin.CP = 2
	}
	return p
}

// TestShortcutsKeepRanking: the search's shortcuts — pruning by least step
// (leastStep, the expert-degree and recomputation bounds) and the memo of
// plans' memory across shapes (fitMemo) — change nothing: over many random
// profiles, each alone and both together give the ranking (rows, plans,
// figures, count, closest miss) that the exhaustive, unremembered search
// gives, on the whole catalog (the memo is shared by shapes with the same
// GPUs per node). Making leastStep 5% too high fails it.
func TestShortcutsKeepRanking(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	n := 40
	if testing.Short() {
		n = 15
	}
	r := rand.New(rand.NewPCG(19, 2026))
	checked, ranked := 0, 0
	for i := 0; checked < n && i < 20*n; i++ {
		p := randomProfile(r)
		if len(p.Validate()) > 0 {
			continue
		}
		o := Options{Offers: c.Offers(), Accelerator: c.Accelerator, Limit: 40,
			MaxNodes: 1 << r.IntN(6)}
		if r.IntN(4) == 0 {
			o.Deadline = time.Duration(1+r.IntN(200)) * time.Hour
		}
		full := o
		full.exhaustive, full.noMemo = true, true
		want, err := Rank(p, full)
		if err != nil {
			t.Fatalf("profile %d %+v: %v", i, p, err)
		}
		checked++
		if want.Ranked > 0 {
			ranked++
		}
		for _, v := range []struct {
			name               string
			exhaustive, noMemo bool
		}{{"pruned", false, true}, {"memo", true, false}, {"both", false, false}} {
			o := o
			o.exhaustive, o.noMemo = v.exhaustive, v.noMemo
			got, err := Rank(p, o)
			if err != nil {
				t.Fatalf("profile %d (%s): %v", i, v.name, err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("profile %d %s: %+v: %s changed the ranking (-exhaustive +shortcut):\n%s", i, describeProfile(p), p, v.name, d)
			}
		}
	}
	if checked < n || ranked < n/2 {
		t.Fatalf("%d valid profiles, %d with rows: too few to show anything", checked, ranked)
	}
}

func describeProfile(p Profile) string {
	name := p.Preset
	if name == "" {
		name = fmt.Sprintf("%d experts", p.Model.Experts)
	}
	return fmt.Sprintf("%s %s", name, p.Task)
}

// TestTrainingMemoryIgnoresCapacity: fitMemo keys a plan's memory by the
// plan alone, which holds only while training memory does not depend on
// the GPU's capacity. If a formula starts to (an overhead that scales with
// the card), this fails, and the memo's key must gain the capacity.
func TestTrainingMemoryIgnoresCapacity(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 19))
	tried := 0
	for tried < 300 {
		p := randomProfile(r)
		if !p.Task.Training() || len(p.Validate()) > 0 {
			continue
		}
		w := mustResolve(t, p)
		tried++
		perNode := []int{1, 2, 4, 8, 16}[r.IntN(5)]
		plan := Plan{Nodes: 1 << r.IntN(5), GPUsPerNode: perNode, TP: min(perNode, 1<<r.IntN(4)), PP: 1 << r.IntN(3),
			ZeRO: r.IntN(4), Recompute: []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}[r.IntN(3)],
			Offload: r.IntN(2) == 0, MicroBatch: 1 << r.IntN(4), EP: []int{0, 2, 8}[r.IntN(3)]}
		plan.DP = max(1, plan.GPUs()/(plan.TP*plan.PP))
		a, b := w.trainingMemory(plan, 16*gib), w.trainingMemory(plan, 141*gib)
		if a != b {
			t.Fatalf("%s, plan %s: memory %+v at 16 GiB, %+v at 141 GiB", describeProfile(p), plan, a, b)
		}
	}
}

// TestFitKeyIsOneToOne: distinct plans the search builds get distinct
// memo keys, and fields beyond the key's bits are refused rather than
// folded.
func TestFitKeyIsOneToOne(t *testing.T) {
	t.Parallel()
	seen := map[uint64]Plan{}
	for _, nodes := range []int{1, 2, 3, 64, 4096} {
		for _, per := range []int{1, 4, 8, 16} {
			for _, tp := range []int{1, 2, 8} {
				for _, pp := range []int{1, 4, 12} {
					for _, ep := range []int{0, 2, 64, 256} {
						for _, mb := range []int{1, 3, 8} {
							for z := range 4 {
								for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
									for _, off := range []bool{false, true} {
										for _, offP := range []bool{false, true} {
											p := Plan{Nodes: nodes, GPUsPerNode: per, TP: tp, PP: pp, EP: ep, MicroBatch: mb, ZeRO: z, Recompute: rc, Offload: off, OffloadParams: offP}
											k, ok := fitKey(&p)
											if !ok {
												t.Fatalf("plan %+v refused", p)
											}
											if q, dup := seen[k]; dup {
												t.Fatalf("plans %+v and %+v share key %#x", q, p, k)
											}
											seen[k] = p
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	for _, p := range []Plan{{Nodes: 1 << 16}, {GPUsPerNode: 256}, {TP: 256}, {PP: 256}, {EP: 1024}, {MicroBatch: 256}, {ZeRO: 4}, {Recompute: "sometimes"}, {Nodes: -1}} {
		if _, ok := fitKey(&p); ok {
			t.Errorf("plan %+v: key given for fields beyond its bits", p)
		}
	}
}

// TestShortcutsKeepSearch is TestShortcutsKeepRanking one level down, and
// stricter: every shape's search result (the best plan at each node count,
// its memory and timing, and the closest miss) is the exhaustive,
// unremembered search's, also for plans no row ends up showing (the
// closest miss only where nothing fits, the only time it is shown).
func TestShortcutsKeepSearch(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	// Every shape of the catalog for the benchmark's MoE workloads; for
	// the others, the first of each (GPU count, fabric, GPU): GPUs per node
	// 1 to 16, PCIe and NVLink, small and large memory.
	var all, sample []shape
	seen := map[shape]bool{}
	class := map[[3]any]bool{}
	for _, of := range c.Offers() {
		acc, ok := c.Accelerator(of.GPU)
		if !ok || acc.BF16TFLOPS == 0 {
			continue
		}
		capacity := float64(of.GPUMemory)
		if capacity == 0 {
			capacity = float64(acc.Memory)
		}
		sh := shape{gpu: of.GPU, perNode: of.GPUCount, capacity: capacity * usableMemory, link: of.Interconnect,
			hostMem: float64(of.Memory), networkGbps: networkGbps(of.Provider, of.InstanceType)}
		if seen[sh] {
			continue
		}
		seen[sh] = true
		all = append(all, sh)
		if k := [3]any{of.GPUCount, of.Interconnect, of.GPU}; !class[k] && len(sample) < 48 {
			class[k] = true
			sample = append(sample, sh)
		}
	}
	r := rand.New(rand.NewPCG(5, 19))
	checked := 0
	for i := 0; checked < 40+len(benchWorkloads) && i < 1000; i++ {
		// The benchmark's workloads first, then random ones.
		var p Profile
		if i < len(benchWorkloads) {
			p = benchWorkloads[i].p
		} else {
			p = randomProfile(r)
		}
		if !p.Task.Training() || len(p.Validate()) > 0 {
			continue
		}
		checked++
		w := mustResolve(t, p)
		lim := searchLimits{maxNodes: 1 << r.IntN(7)}
		if i < len(benchWorkloads) {
			lim.maxNodes = 64 // Rank's default
		} else if r.IntN(4) == 0 {
			lim.deadline = float64(1+r.IntN(500)) * 3600
		}
		steps := w
		steps.steps = 0
		memo := getFitMemo(&steps)
		shapes := sample
		if i < len(benchWorkloads) && w.arch.Experts > 0 {
			shapes = all // where skipped expert degrees are worked out again
		}
		for _, sh := range shapes {
			acc, _ := c.Accelerator(sh.gpu)
			hw, _, ok := newHardware(&w, acc, Calibration{})
			if !ok {
				continue
			}
			hw.intra, hw.pcie = linkRate(acc, sh.link)
			hw.inter = sh.networkGbps / 8 * 1e9 * netEfficiency
			hw.capacity, hw.hostMem, hw.gpusPerNode = sh.capacity, sh.hostMem, sh.perNode
			hw.ckptBW, hw.restart = defaultCheckpointGBs*1e9, defaultRestart.Seconds()
			ex := w
			ex.exhaustive = true
			want := ex.searchTraining(sh, &hw, lim, nil)
			got := w.searchTraining(sh, &hw, lim, memo)
			if len(want.plans) > 0 {
				// The closest miss is reported only when nothing fits;
				// pruning skips plans (and their misses) only once a plan
				// fits.
				want.shortfall, want.shortfallPlan = 0, Plan{}
				got.shortfall, got.shortfallPlan = 0, Plan{}
			}
			if !reflect.DeepEqual(want, got) {
				t.Errorf("%s on %d×%s (%s), limits %+v: search with shortcuts differs:\nexhaustive %+v\nshortcuts  %+v",
					describeProfile(p), sh.perNode, sh.gpu, sh.link, lim, plansOf(want), plansOf(got))
			}
		}
		putFitMemo(memo)
	}
	if checked < 40+5 {
		t.Fatalf("only %d valid training profiles", checked)
	}
}

func plansOf(sr searchResult) []string {
	var out []string
	for _, c := range sr.plans {
		out = append(out, fmt.Sprintf("%d nodes: %s %.6gs", c.plan.Nodes, c.plan, c.timing.Seconds))
	}
	return append(out, fmt.Sprintf("shortfall %.6g %s", sr.shortfall, sr.shortfallPlan))
}
