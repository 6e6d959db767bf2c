package advisor

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/catalog"
)

// truth is one published figure the models must reproduce within tol
// (relative). fitted marks figures the constants were fitted to; the
// others are held out.
type truth struct {
	kind   string // memory, throughput, time-to-train
	source string
	want   float64
	tol    float64
	fitted bool
	got    func(t *testing.T) float64
}

var (
	a100 = catalog.Accelerator{Name: "A100-80GB", Memory: 80 << 30, MemoryBandwidthGBs: 2039, BF16TFLOPS: 312, InterconnectGBs: 600}
	h100 = catalog.Accelerator{Name: "H100", Memory: 80 << 30, MemoryBandwidthGBs: 3350, BF16TFLOPS: 989, InterconnectGBs: 900}
)

func mustResolve(t *testing.T, p Profile) workload {
	t.Helper()
	w, fe := resolve(p)
	if fe != nil {
		t.Fatalf("resolving %+v: %v", p, fe)
	}
	return w
}

// zeroStates is the ZeRO paper's model states per GPU for a 7.5B model on
// 64 GPUs (Rajbhandari et al. 2020, Figure 1): weights + gradients +
// optimizer without the per-layer gather buffers.
func zeroStates(stage int) func(t *testing.T) float64 {
	return func(t *testing.T) float64 {
		w := mustResolve(t, Profile{Task: PreTrain, Tokens: 1, Model: Model{Parameters: 7.5e9, Layers: 32, Hidden: 4096, Heads: 32, Vocab: 50000}})
		m := w.trainingMemory(Plan{Nodes: 8, GPUsPerNode: 8, TP: 1, PP: 1, DP: 64, ZeRO: stage, MicroBatch: 1}, 80*gib)
		return (m.weights + m.grads + m.optim - m.gather) / 1e9
	}
}

// megatronHFU is the hardware FLOP/s per A100 the model assumes for a
// Megatron GPT of hidden size h (Narayanan et al. 2021 report hardware
// FLOP/s with full recomputation, which is the achieved rate here).
func megatronHFU(h, heads int) func(t *testing.T) float64 {
	return func(t *testing.T) float64 {
		w := mustResolve(t, Profile{Task: PreTrain, Tokens: 1, Model: Model{Layers: 24, Hidden: h, Heads: heads, Vocab: 51200, GatedMLP: ptr(false)}})
		hw, reason, ok := newHardware(&w, catalog.Accelerator{Name: "A100", BF16TFLOPS: 312}, Calibration{})
		if !ok {
			t.Fatal(reason)
		}
		return hw.peak * hw.mfu / 1e12
	}
}

// gpuHours is the model's GPU-hours to pre-train a preset on tokens, at
// the published sequence length, without communication (the published
// runs are large enough that it is mostly hidden; see the docs).
func gpuHours(preset string, seq int, tokens float64, acc catalog.Accelerator) func(t *testing.T) float64 {
	return func(t *testing.T) float64 {
		w := mustResolve(t, Profile{Preset: preset, Task: PreTrain, Tokens: tokens, SequenceLength: seq})
		hw, reason, ok := newHardware(&w, acc, Calibration{})
		if !ok {
			t.Fatal(reason)
		}
		_, fpt := w.flopsPerToken(RecomputeNone)
		return fpt * tokens / (hw.peak * hw.mfu) / 3600
	}
}

var groundTruth = map[string]truth{
	// Memory.
	"zero 7.5B baseline": {kind: "memory", want: 120, tol: 0.01, got: zeroStates(0),
		source: "Rajbhandari et al. 2020 (ZeRO) Figure 1: 7.5B, Nd=64, baseline 120 GB"},
	"zero 7.5B Pos": {kind: "memory", want: 31.4, tol: 0.01, got: zeroStates(1),
		source: "ZeRO Figure 1: P_os 31.4 GB"},
	"zero 7.5B Pos+g": {kind: "memory", want: 16.6, tol: 0.01, got: zeroStates(2),
		source: "ZeRO Figure 1: P_os+g 16.6 GB"},
	"zero 7.5B Pos+g+p": {kind: "memory", want: 1.88, tol: 0.01, got: zeroStates(3),
		source: "ZeRO Figure 1: P_os+g+p 1.88 GB"},
	"OPT-13B KV per token": {kind: "memory", want: 819200, tol: 0, source: "Kwon et al. 2023 (vLLM) §3: 800 KB per token for OPT-13B",
		got: func(t *testing.T) float64 {
			w := mustResolve(t, Profile{Task: Serving, Serving: ServingSpec{InputTokens: 1, OutputTokens: 1},
				Model: Model{Layers: 40, Hidden: 5120, Heads: 40, Vocab: 50272, GatedMLP: ptr(false)}})
			return w.kvBytes
		}},
	"OPT-13B weights on A100-40GB": {kind: "memory", want: 26, tol: 0.03, source: "Kwon et al. 2023 Figure 1: 26 GB of parameters for a 13B model",
		got: func(t *testing.T) float64 {
			w := mustResolve(t, Profile{Task: Serving, Serving: ServingSpec{InputTokens: 1, OutputTokens: 1},
				Model: Model{Layers: 40, Hidden: 5120, Heads: 40, Vocab: 50272, GatedMLP: ptr(false), TiedEmbeddings: ptr(true)}})
			wt, _ := w.servingWeights(1)
			return wt / 1e9
		}},
	"Llama-2-70B KV per token": {kind: "memory", want: 327680, tol: 0, source: "2·80 layers·8 KV heads·128·2 bytes (Llama 2 config; GQA)",
		got: func(t *testing.T) float64 {
			return mustResolve(t, Profile{Preset: "llama-2-70b", Task: Serving, Serving: ServingSpec{InputTokens: 1, OutputTokens: 1}}).kvBytes
		}},
	"QLoRA 65B fits a 48 GB GPU": {kind: "memory", want: 1, tol: 0, source: "Dettmers et al. 2023 (QLoRA) abstract: finetune a 65B model on a single 48GB GPU (r=64 on all linear layers, seq 512, batch 1, gradient checkpointing, paged AdamW = optimizer states paged to host)",
		got: func(t *testing.T) float64 {
			w := mustResolve(t, Profile{Task: QLoRA, Tokens: 1, SequenceLength: 512, GlobalBatch: 16, MicroBatch: 1, LoRA: LoRASpec{Rank: 64},
				Model: Model{Layers: 80, Hidden: 8192, FFN: 22016, Heads: 64, Vocab: 32000}})
			m := w.trainingMemory(Plan{Nodes: 1, GPUsPerNode: 1, TP: 1, PP: 1, DP: 1, Recompute: RecomputeFull, Offload: true, MicroBatch: 1}, 48e9)
			if m.total() <= 48e9 {
				return 1
			}
			t.Logf("QLoRA 65B needs %.1f GB", m.total()/1e9)
			return 0
		}},
	"QLoRA double quantisation constants": {kind: "memory", want: 0.127, tol: 0.001, source: "QLoRA §3: double quantisation costs 0.127 bits per parameter",
		got: func(t *testing.T) float64 {
			w := mustResolve(t, Profile{Preset: "llama-2-7b", Task: QLoRA, Tokens: 1})
			m := w.trainingMemory(Plan{Nodes: 1, GPUsPerNode: 1, TP: 1, PP: 1, DP: 1, MicroBatch: 1}, 80*gib)
			return m.quant * 8 / (w.params - w.embed)
		}},

	// Throughput: hardware TFLOP/s per A100 in Narayanan et al. 2021
	// ("Efficient Large-Scale Language Model Training on GPU Clusters Using
	// Megatron-LM") Table 1, held out (the MFU constants were fitted to
	// Korthikanti et al. 2022 and Llama 2).
	"Megatron 1.7B":        {kind: "throughput", want: 137, tol: 0.15, got: megatronHFU(2304, 24), source: "Narayanan et al. 2021 Table 1: 1.7B, 32 GPUs, 137 TFLOP/s"},
	"Megatron 7.5B":        {kind: "throughput", want: 142, tol: 0.15, got: megatronHFU(4096, 32), source: "Narayanan et al. 2021 Table 1: 7.5B, 128 GPUs, 142 TFLOP/s"},
	"Megatron 18.4B":       {kind: "throughput", want: 135, tol: 0.15, got: megatronHFU(6144, 48), source: "Narayanan et al. 2021 Table 1: 18.4B, 256 GPUs, 135 TFLOP/s"},
	"Megatron 39.1B":       {kind: "throughput", want: 138, tol: 0.15, got: megatronHFU(8192, 64), source: "Narayanan et al. 2021 Table 1: 39.1B, 512 GPUs, 138 TFLOP/s"},
	"Megatron 145.6B":      {kind: "throughput", want: 148, tol: 0.15, got: megatronHFU(12288, 96), source: "Narayanan et al. 2021 Table 1: 145.6B, 1536 GPUs, 148 TFLOP/s"},
	"Megatron 529.6B":      {kind: "throughput", want: 163, tol: 0.15, got: megatronHFU(20480, 128), source: "Narayanan et al. 2021 Table 1: 529.6B, 2520 GPUs, 163 TFLOP/s"},
	"Megatron 1T":          {kind: "throughput", want: 163, tol: 0.15, got: megatronHFU(25600, 160), source: "Narayanan et al. 2021 Table 1: 1008B, 3072 GPUs, 163 TFLOP/s"},
	"OPT-175B":             {kind: "throughput", want: 147, tol: 0.15, got: megatronHFU(12288, 96), source: "Zhang et al. 2022 (OPT) §2.4: up to 147 TFLOP/s per A100-80GB"},
	"BLOOM-176B":           {kind: "throughput", want: 156, tol: 0.15, got: megatronHFU(14336, 112), source: "BigScience 2022 (BLOOM) §3.4: 156 TFLOP/s per A100-80GB"},
	"Korthikanti 22B MFU":  {kind: "throughput", want: 0.415 * 312, tol: 0.1, fitted: true, got: megatronHFU(6144, 64), source: "Korthikanti et al. 2022 Table 5: 22B, MFU 41.5%"},
	"Korthikanti 175B MFU": {kind: "throughput", want: 0.514 * 312, tol: 0.1, fitted: true, got: megatronHFU(12288, 96), source: "Korthikanti et al. 2022 Table 5: 175B, MFU 51.4%"},
	"Korthikanti 530B MFU": {kind: "throughput", want: 0.560 * 312, tol: 0.1, fitted: true, got: megatronHFU(20480, 128), source: "Korthikanti et al. 2022 Table 5: 530B, MFU 56.0%"},

	// Time to train: published GPU-hours, which include restarts,
	// evaluation and data stalls the model leaves out.
	"Llama 2 7B": {kind: "time-to-train", want: 184320, tol: 0.25, fitted: true, got: gpuHours("llama-2-7b", 4096, 2e12, a100),
		source: "Touvron et al. 2023 (Llama 2) Table 2: 184,320 A100-80GB GPU-hours for 2T tokens"},
	"Llama 2 13B": {kind: "time-to-train", want: 368640, tol: 0.25, fitted: true, got: gpuHours("llama-2-13b", 4096, 2e12, a100),
		source: "Llama 2 Table 2: 368,640 GPU-hours"},
	"Llama 2 70B": {kind: "time-to-train", want: 1720320, tol: 0.25, fitted: true, got: gpuHours("llama-2-70b", 4096, 2e12, a100),
		source: "Llama 2 Table 2: 1,720,320 GPU-hours"},
	"Llama 3 8B": {kind: "time-to-train", want: 1.3e6, tol: 0.25, got: gpuHours("llama-3-8b", 8192, 15e12, h100),
		source: "Meta Llama 3 model card: 1.3M H100-80GB GPU-hours, 15T tokens"},
	"Llama 3 70B": {kind: "time-to-train", want: 6.4e6, tol: 0.25, got: gpuHours("llama-3-70b", 8192, 15e12, h100),
		source: "Meta Llama 3 model card: 6.4M H100-80GB GPU-hours, 15T tokens"},
	"Llama 3.1 405B": {kind: "time-to-train", want: 30.84e6, tol: 0.25, got: gpuHours("llama-3.1-405b", 8192, 15.6e12, h100),
		source: "Meta Llama 3.1 model card: 30.84M H100-80GB GPU-hours, 15.6T tokens (short-context phase length)"},
}

// knownMisses are ground-truth cases the model does not meet; they are
// reported in the accuracy summary and docs/advisor.md, not hidden. A case
// listed here that starts passing fails the test so the list stays true.
var knownMisses = map[string]string{
	"Llama 3 8B": "published hours include a 15T-token run of a small model at 16k-GPU scale, where MFU is far below the width-based factor",
}

func TestAccuracy(t *testing.T) {
	t.Parallel()
	type tally struct{ ok, total int }
	byKind := map[string]*tally{}
	names := make([]string, 0, len(groundTruth))
	for name := range groundTruth {
		names = append(names, name)
	}
	sort.Strings(names)
	var lines []string
	for _, name := range names {
		tr := groundTruth[name]
		got := tr.got(t)
		rel := math.Abs(got/tr.want - 1)
		if tr.want == 0 {
			rel = math.Abs(got)
		}
		within := rel <= tr.tol+1e-9
		k := byKind[tr.kind]
		if k == nil {
			k = &tally{}
			byKind[tr.kind] = k
		}
		k.total++
		if within {
			k.ok++
		}
		_, miss := knownMisses[name]
		switch {
		case !within && !miss:
			t.Errorf("%s: got %.4g, want %.4g ± %.0f%% (%.1f%% off); source: %s", name, got, tr.want, tr.tol*100, rel*100, tr.source)
		case within && miss:
			t.Errorf("%s is listed as a known miss but is within tolerance now; update knownMisses and the docs", name)
		}
		lines = append(lines, fmt.Sprintf("%-36s %-14s want %-10.4g got %-10.4g off %5.1f%% tol %3.0f%% %v", name, tr.kind, tr.want, got, rel*100, tr.tol*100, within))
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var summary []string
	for _, k := range kinds {
		summary = append(summary, fmt.Sprintf("%s %d/%d", k, byKind[k].ok, byKind[k].total))
	}
	t.Logf("accuracy: %s\n%s", strings.Join(summary, ", "), strings.Join(lines, "\n"))
}
