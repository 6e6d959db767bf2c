package advisor

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpufleet/gpufleet/internal/catalog"
)

// Calibration holds rates measured on real GPUs by `gpufleet bench`, keyed
// by catalog GPU name. The advisor uses a measured rate instead of the
// datasheet one and says so in its assumptions.
type Calibration struct {
	GPUs map[string]Measured `json:"gpus"`
}

// Measured is what one GPU model delivered in a benchmark.
type Measured struct {
	// BF16TFLOPS is a large bf16 matmul's rate; zero means not measured.
	BF16TFLOPS float64 `json:"bf16TFLOPS,omitempty"`
	// MemoryBandwidthGBs is device-memory copy bandwidth (read + write
	// bytes per second); zero means not measured.
	MemoryBandwidthGBs float64 `json:"memoryBandwidthGBs,omitempty"`
	// Method says how it was measured ("torch matmul 8192³ bf16").
	Method string `json:"method,omitempty"`
	// MeasuredAt is when, RFC 3339, as the shell recorded it.
	MeasuredAt string `json:"measuredAt,omitempty"`
	Host       string `json:"host,omitempty"`
}

// lookup finds a GPU's measurement, ignoring case.
func (c Calibration) lookup(gpu string) (Measured, bool) {
	if m, ok := c.GPUs[gpu]; ok {
		return m, true
	}
	for k, m := range c.GPUs {
		if strings.EqualFold(k, gpu) {
			return m, true
		}
	}
	return Measured{}, false
}

// Utilisation constants, calibrated from published measurements (the
// accuracy tests check the combination against the sources' figures).
const (
	// gemmEfficiency is the share of datasheet peak a large bf16 matmul
	// reaches (cuBLAS on A100/H100: 75–85%, NVIDIA "Matrix multiplication
	// background" performance guide); a measured matmul rate is divided by
	// it to recover the datasheet-relative MFU.
	gemmEfficiency = 0.8
	// copyEfficiency is the share of datasheet bandwidth a device copy
	// reaches (STREAM-like copies on A100/H100 reach 85–92%).
	copyEfficiency = 0.9
	// mbu is decode's memory-bandwidth utilisation: serving engines read
	// weights and KV cache at 60–80% of peak (Databricks 2023, "LLM
	// Inference Performance Engineering: Best Practices", MBU figures;
	// TensorRT-LLM batch-1 latencies).
	mbu = 0.7
	// prefillMFU is prefill's utilisation: a long prompt is one large
	// matmul chain, typically 40–60% of peak (same source).
	prefillMFU = 0.5
	// decodeMFU bounds decode's compute at large batch.
	decodeMFU = 0.4
	// smallAllReduce is a latency-bound NCCL all-reduce of a few KiB
	// inside an NVLink domain (nccl-tests all_reduce_perf: ~10 µs on
	// NVSwitch; ~30 µs over PCIe).
	smallAllReduceNVLink = 10e-6
	smallAllReducePCIe   = 30e-6
	// linkEfficiency is NCCL bus bandwidth over the link's unidirectional
	// rate (nccl-tests on 8×A100 NVSwitch: ~230 of 300 GB/s; 8×H100:
	// ~360 of 450 GB/s).
	linkEfficiency = 0.77
	// netEfficiency is the same for the inter-node network (EFA/IB: 80–90%).
	netEfficiency = 0.8
	// pcieHostGBs is host↔device bandwidth one GPU gets for offload with
	// pinned memory (PCIe Gen4 x16: 25 of 32 GB/s; shared links halve it).
	pcieHostGBs = 12
	// cpuAdamParamsPerSec is DeepSpeed CPU-Adam's update rate per node
	// (Ren et al. 2021 "ZeRO-Offload", §6: ~1 billion parameters per
	// second on a 2-socket host with AVX-512).
	cpuAdamParamsPerSec = 1e9
)

// baseMFU is the model FLOPs utilisation (model FLOPs per second over
// datasheet dense bf16 peak) that large dense models reach with tuned
// frameworks, by GPU generation.
//   - Ampere datacenter 0.50: Korthikanti et al. 2022 Table 5 (A100, selective
//     recomputation + SP), hardware FLOPs utilisation (the advisor's rate
//     counts recomputation): 43.7% (22B), 52.8% (175B), 57.0% (530B, 1T);
//     OPT-175B 147 TFLOP/s per A100 (Zhang et al. 2022, §2.4) = 47%.
//   - Hopper 0.40: Llama 3 405B on 8,192–16,384 H100 at 38–43% BF16 MFU
//     (Dubey et al. 2024, Table 4).
//   - Volta 0.30: Megatron-LM's 8.3B at 30% of V100 peak per GPU (Shoeybi et
//     al. 2019, §5.1).
//   - Blackwell 0.35, CDNA3 0.30, PCIe and workstation cards 0.35: few
//     published figures; flagged as weak in the output.
func baseMFU(gpu string) (float64, bool) {
	switch g := strings.ToUpper(gpu); {
	case g == "A100" || g == "A100-80GB":
		return 0.50, true
	case strings.HasPrefix(g, "H100") || g == "H200" || g == "GH200":
		return 0.40, true
	case g == "V100" || g == "V100-32GB":
		return 0.30, true
	case g == "B200" || g == "B300" || g == "GB200" || g == "GB300":
		return 0.35, false
	case strings.HasPrefix(g, "MI3"):
		return 0.30, false
	}
	return 0.35, false
}

// flashMFU is the steady-state training utilisation (achieved FLOP/s,
// recomputation included, over datasheet dense bf16 peak) of FlashAttention
// era stacks (PyTorch 2 FSDP or Megatron-Core with FlashAttention), by GPU.
// Fitted to the MPT benchmarks (mosaicml/llm-foundry
// scripts/train/benchmarking/README.md): A100-80GB rows, 1B–30B, 2k–8k
// tokens, MFU 0.56–0.64 without and HFU 0.73–0.77 with activation
// checkpointing → 0.66; H100 rows at 2k tokens on 8 GPUs, MFU 0.40–0.46 and
// HFU 0.51 → 0.47 (H100 kernels reach a smaller share of their higher
// peak). The eager-attention figures (baseMFU × sizeFactor) stay fitted to
// the pre-FlashAttention Megatron runs. The other rows of that README, the
// A100-40GB ones and Llama 3's reported hours are held out.
func flashMFU(gpu, framework string) (float64, bool) {
	switch g := strings.ToUpper(gpu); {
	case g == "A100" || g == "A100-80GB":
		return 0.66, true
	case strings.HasPrefix(g, "H100") || g == "H200" || g == "GH200":
		if framework == "megatron" {
			return megatronHopperMFU, true
		}
		return 0.47, true
	}
	return 0, false
}

// megatronHopperMFU is flashMFU for `framework: megatron` on Hopper:
// Megatron-Core with Transformer Engine runs dense models faster than the
// PyTorch-FSDP stacks 0.47 was fitted to. Fitted (least RMS of the log
// error, 0.47–0.70 in steps of 0.005) to the BF16 rows of NVIDIA's DGX
// Cloud benchmarking recipes for NeMo 24.12 on H100 (NVIDIA/dgxc-benchmarking
// llama3.1/README_8b.md, README_70b.md, README_405b.md@8f5cbb37 and
// nemotron/README_15b.md@0b71cfda: Llama 3.1 8B, 70B, 405B and Nemotron-4
// 15B at 54–62% of bf16 peak by their own model-FLOPs count), taken by a
// rule fixed before they were evaluated (docs/advisor.md). 0.635 in the
// ninth session; 0.59 in the tenth, when Llama's zero dropout let the
// 405B row run without recomputation, as its recipe does; 0.57 since the
// twelfth, when the untied input embedding stopped being counted as
// 6·V·h FLOPs per token (matmulParams: Llama 3's 128k vocabulary made that
// 6.5% of the 8B's weight FLOPs, Nemotron-4's 256k 10% of its).
const megatronHopperMFU = 0.57

// flashSizeFactor is the width dependence of flashMFU: flat from a hidden
// size of 2048 (MPT 1B–30B reach the same share), falling below it (MPT
// 125M at h=768: 0.44 of peak against 0.60 for 1B): 0.75 + 0.125 per 1024
// of h, at most 1.
func flashSizeFactor(hidden int) float64 {
	return math.Min(1, 0.75+0.125*float64(hidden)/1024)
}

// hardwareInterruptionsPerGPUHour is how often a synchronous training job
// is interrupted, per GPU-hour of the job, by hardware and host failures
// and planned maintenance: Llama 3's 405B pre-training saw 466 job
// interruptions (419 unexpected, 47 planned) in a 54-day snapshot on 16,384
// H100 GPUs (Dubey et al. 2024 "The Llama 3 Herd of Models", §3.3.4 and
// Table 5): 466 ÷ (54 · 24 · 16,384) ≈ 2.2e-5, one every 3 hours at that
// scale. Each interruption restarts the whole job from its last checkpoint
// (Young/Daly in youngDaly), so the loss grows with the GPU count.
const hardwareInterruptionsPerGPUHour = 466.0 / (54 * 24 * 16384)

// sizeFactor scales the eager-attention utilisation with the hidden size:
// larger matmuls run closer to peak. 0.7 + 0.025 per 1024 of h, fitted to
// Korthikanti et al. 2022 Table 5 and Llama 2's A100 hours (Touvron et al.
// 2023 Table 2), in [0.55, 1.14]. The cap is Table 5's 530B hardware FLOPs
// utilisation over the Ampere level, 0.570 / 0.50 (1.12 until 2026-12-07,
// from its model FLOPs utilisation 0.560, which the advisor's hardware rate
// should not have been compared with; docs/advisor.md).
func sizeFactor(hidden int) float64 {
	f := 0.7 + 0.025*float64(hidden)/1024
	return math.Min(1.14, math.Max(0.55, f))
}

// hardware is one accelerator shape's effective rates.
type hardware struct {
	gpu         string
	peak        float64 // FLOP/s, datasheet dense, for the workload's format
	mfu         float64 // model FLOPs utilisation for training/prefill
	bw          float64 // bytes/s device memory, datasheet or measured-adjusted
	intra       float64 // bytes/s per GPU inside the node
	pcie        bool
	inter       float64 // bytes/s per node across nodes
	capacity    float64 // bytes per GPU
	hostMem     float64 // bytes per node
	gpusPerNode int
	// ckptBW is checkpoint write bandwidth per node (bytes/s) and restart
	// the seconds to replace a failed node and resume; they price hardware
	// interruptions (trainingTime) and spot ones (quote).
	ckptBW  float64
	restart float64
	notes   []string
}

// newHardware derives rates for a GPU model and workload; ok is false with
// a reason when the spec table lacks what the estimate needs.
func newHardware(w *workload, acc catalog.Accelerator, cal Calibration) (hardware, string, bool) {
	hw := hardware{gpu: acc.Name}
	var notes []string
	var peak float64
	switch w.Precision {
	case FP32:
		peak = acc.FP32TFLOPS
		notes = append(notes, "fp32 without TF32 tensor cores")
	case FP16:
		peak = acc.FP16TFLOPS
		if peak == 0 {
			peak = acc.BF16TFLOPS
		}
	default: // bf16, fp8, and the 16-bit compute of int8/int4/nf4 weights
		peak = acc.BF16TFLOPS
		if peak == 0 && acc.FP16TFLOPS > 0 {
			peak = acc.FP16TFLOPS
			notes = append(notes, "no bf16 on this GPU: estimated as fp16 mixed precision")
		}
	}
	mfu, solid := baseMFU(acc.Name)
	if !solid {
		notes = append(notes, fmt.Sprintf("MFU %.2f for %s is not calibrated against published runs", mfu, acc.Name))
	}
	if f, ok := flashMFU(acc.Name, w.Framework); ok && w.Attention == Flash && w.Task.Training() {
		mfu = f * flashSizeFactor(w.arch.Hidden)
	} else {
		mfu *= sizeFactor(w.arch.Hidden)
	}
	fp8Cores := strings.HasPrefix(acc.Name, "H") || strings.HasPrefix(acc.Name, "GH") || strings.HasPrefix(acc.Name, "B") ||
		strings.HasPrefix(acc.Name, "GB") || strings.HasPrefix(acc.Name, "L4") || strings.HasPrefix(acc.Name, "MI3")
	if w.Precision == FP8 && !w.Task.Training() {
		// FP8 serving (W8A8, e.g. ModelOpt/vLLM fp8 checkpoints) runs its
		// matmuls on FP8 tensor cores: dense FP8 peak is twice bf16 on
		// Hopper, Ada, Blackwell and CDNA3 (NVIDIA H100 datasheet: 1,979
		// vs 989 TFLOPS dense).
		if fp8Cores && peak > 0 {
			peak *= 2
		} else {
			notes = append(notes, "no fp8 tensor cores: fp8 weights served at the bf16 rate")
		}
	}
	if w.Precision == FP8 && w.Task.Training() {
		// FP8 doubles datasheet peak on Hopper/Ada/Blackwell/CDNA3, but only
		// the transformer layers' linear GEMMs run in it (fp8Gain). The
		// utilisation is restated against the doubled peak.
		if peak > 0 && fp8Cores {
			g := w.fp8Gain(peak*1e12*mfu, peak*1e12, acc.MemoryBandwidthGBs*1e9)
			peak *= 2
			mfu *= g / 2
			notes = append(notes, fmt.Sprintf("fp8 training: %.2f× the bf16 rate (linear GEMMs at twice the rate, casts at HBM speed; attention, embeddings and the rest stay bf16)", g))
		} else {
			notes = append(notes, "no fp8 tensor cores: estimated at bf16 rate")
		}
	}
	bw := acc.MemoryBandwidthGBs * 1e9
	if m, ok := cal.lookup(acc.Name); ok {
		if m.BF16TFLOPS > 0 && w.Precision != FP32 {
			// Measured matmul rate stands in for gemmEfficiency × peak.
			mult := 1.0
			if w.Precision == FP8 && peak > 0 && peak > acc.BF16TFLOPS*1e12*1.5 {
				mult = 2
			}
			peak = m.BF16TFLOPS * 1e12 * mult / gemmEfficiency
			notes = append(notes, fmt.Sprintf("compute rate measured on this %s (%.0f TFLOP/s bf16 matmul)", acc.Name, m.BF16TFLOPS))
		} else {
			peak *= 1e12
		}
		if m.MemoryBandwidthGBs > 0 {
			bw = m.MemoryBandwidthGBs * 1e9 / copyEfficiency
			notes = append(notes, fmt.Sprintf("memory bandwidth measured on this %s (%.0f GB/s)", acc.Name, m.MemoryBandwidthGBs))
		}
	} else {
		peak *= 1e12
	}
	if peak <= 0 {
		return hw, fmt.Sprintf("the spec table has no dense %s tensor rate for %s; run `gpufleet bench` on one to measure it", w.Precision, acc.Name), false
	}
	if !w.Task.Training() && bw <= 0 {
		return hw, fmt.Sprintf("the spec table has no memory bandwidth for %s; run `gpufleet bench` on one to measure it", acc.Name), false
	}
	hw.peak, hw.mfu, hw.bw, hw.notes = peak, mfu, bw, notes
	return hw, "", true
}

// linkRate is the per-GPU bus bandwidth inside an instance: the
// accelerator's NVLink/Infinity Fabric rate (bidirectional in the spec
// table, halved) for switched or linked instances, PCIe otherwise.
func linkRate(acc catalog.Accelerator, interconnect string) (float64, bool) {
	switch interconnect {
	case catalog.InterconnectNVSwitch, catalog.InterconnectNVLink, catalog.InterconnectInfinityFabric:
		if acc.InterconnectGBs > 64 {
			return acc.InterconnectGBs / 2 * 1e9 * linkEfficiency, false
		}
	}
	// PCIe Gen4 x16: 32 GB/s each way; the spec table's PCIe figure is
	// bidirectional.
	gbs := acc.InterconnectGBs / 2
	if gbs <= 0 || gbs > 64 {
		gbs = 32
	}
	return gbs * 1e9 * linkEfficiency, true
}

// applyMeasured replaces hw's utilisation with a measured training rate:
// tflops model TFLOP/s per GPU, or tokensPerSec tokens/s per GPU times the
// model FLOPs per token (6·N + attention). Zero leaves hw as it is.
//
// The utilisation is applied to the FLOPs a plan executes, recomputation
// included, so the measured rate is converted at the measured run's
// recomputation: the pinned one (Pin.Recompute), else none. A run measured
// with recomputation but not pinned so reads as a slower GPU.
func (w *workload) applyMeasured(hw *hardware, tflops, tokensPerSec float64) {
	rc := w.Pin.Recompute
	if rc == "" {
		rc = RecomputeNone
	}
	model, executed := w.flopsPerToken(rc)
	rate := tflops * 1e12
	if tokensPerSec > 0 {
		rate = tokensPerSec * model
	}
	if rate <= 0 || hw.peak <= 0 || model <= 0 {
		return
	}
	hw.mfu = rate * executed / model / hw.peak
	hw.notes = append(hw.notes, fmt.Sprintf("measured rate: %.0f model TFLOP/s per GPU, %s recomputation (utilisation %.2f of %s peak, recomputed FLOPs included) replaces the utilisation model", rate/1e12, rc, hw.mfu, hw.gpu))
}

// fp8Gain is FP8 training's speed-up over the same run in bf16, by Amdahl's
// law over one token's calibrated bf16 time (rate: the bf16 model FLOP/s the
// utilisation gives): only the transformer layers' linear GEMMs run in FP8
// (Transformer Engine's fp8_autocast and torchao's Float8Linear replace the
// Linear modules; attention, embedding and output layer stay bf16). Their
// time at the rate a large bf16 GEMM reaches, 6·(N_active − N_embed) ÷
// (peak·gemmEfficiency), halves (dense FP8 peak is 2× bf16 on Hopper); the
// rest of the calibrated time is unchanged; each FP8 cast costs 6 bytes per
// element at HBM speed (amax read, read, FP8 write, transposed write) for
// every linear layer's input (forward) and output gradient (backward).
// Chosen over a constant and over halving the linear layers' whole
// calibrated time by independent FP8/bf16 pairs (testdata/fp8pairs.json,
// docs/advisor.md "The FP8 training rate").
func (w *workload) fp8Gain(rate, peak, bw float64) float64 {
	fpt, _ := w.flopsPerToken(RecomputeNone)
	if rate <= 0 || fpt <= 0 {
		return 1
	}
	weights := 6.0
	if w.Task == LoRA || w.Task == QLoRA {
		weights = 4
	}
	bf16 := fpt / rate
	gemm := weights * (w.active - w.embed) / (peak * gemmEfficiency)
	casts := 0.0
	if bw > 0 {
		casts = 6 * w.fp8CastElements() / bw
	}
	t := bf16 - gemm/2 + casts
	if t <= 0 {
		return 2
	}
	return bf16 / t
}

// fp8CastElements counts, per token and all layers, the elements cast to
// FP8: each linear layer's input forward and its output gradient backward.
// Attention: the QKV input h and output h+2·kv·d, the projection input a·d
// and output h. MLP: the fc1 input h and output (mats−1)·f, the fc2 input f
// and output h, for the dense MLP or each expert a token visits (k routed +
// S shared at width f_e).
func (w *workload) fp8CastElements() float64 {
	a := w.arch
	h, aw := float64(a.Hidden), w.attnWidth()
	kv := float64(a.KVHeads * w.headDim)
	attn := h + (aw + 2*kv) + aw + h
	mats := 2.0
	if w.gated {
		mats = 3
	}
	mlp := func(f float64) float64 { return h + (mats-1)*f + f + h }
	moe := w.moeLayers()
	dense := float64(a.Layers - moe)
	per := float64(a.Layers)*attn + dense*mlp(float64(a.FFN))
	if moe > 0 {
		per += float64(moe) * float64(a.ActiveExperts+a.SharedExperts) * mlp(float64(a.ExpertFFN))
	}
	return per
}
