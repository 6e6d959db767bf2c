package advisor

import (
	"fmt"
	"math"
)

// Timing is how a training plan's time splits, per optimizer step, in
// seconds, and in total.
type Timing struct {
	// FLOPs is the work to finish: model FLOPs plus recomputation.
	FLOPs float64 `json:"flops"`
	// Rate is the achieved model FLOP/s per GPU the estimate assumes.
	RatePerGPU float64 `json:"ratePerGPU"`
	MFU        float64 `json:"mfu"`
	Steps      float64 `json:"steps"`
	// Per step:
	Compute float64 `json:"computeSeconds"`
	Bubble  float64 `json:"pipelineBubbleSeconds"`
	TPComm  float64 `json:"tensorParallelCommSeconds"`
	PPComm  float64 `json:"pipelineCommSeconds"`
	DPComm  float64 `json:"dataParallelCommSeconds"` // total, before overlap
	// EPComm is the MoE token all-to-all (dispatch and combine, forward
	// and backward) per step; EPExposed what overlap leaves of it.
	EPComm    float64 `json:"expertParallelCommSeconds,omitempty"`
	EPExposed float64 `json:"expertParallelExposedSeconds,omitempty"`
	Exposed   float64 `json:"exposedCommSeconds"`       // what overlap leaves
	Offload   float64 `json:"offloadSeconds,omitempty"` // host transfers and CPU step
	StepTime  float64 `json:"stepSeconds"`
	// Goodput is the share of wall time spent on steps that are kept:
	// hardware interruptions (at Llama 3's rate per GPU-hour) each cost a
	// restart and the work since the last checkpoint, and checkpoints are
	// written at Young's interval.
	Goodput float64 `json:"goodput,omitempty"`
	// CheckpointEvery is that interval in seconds (0: the run is shorter
	// than one interval and writes none).
	CheckpointEvery float64 `json:"checkpointEverySeconds,omitempty"`
	// Seconds is the time to finish: steps × step time ÷ goodput (spot
	// interruptions come on top, in the row).
	Seconds float64 `json:"seconds"`
	// Serving: one replica's steady state.
	TokensPerSecond float64 `json:"tokensPerSecond,omitempty"` // output tokens, per replica
	TTFT            float64 `json:"ttftSeconds,omitempty"`
	TPOT            float64 `json:"tpotSeconds,omitempty"` // time per output token
	Latency         float64 `json:"latencySeconds,omitempty"`
	// Terms is every time term with its formula (explain and plan only).
	Terms []Term `json:"terms,omitempty"`
}

// timeTerms names the formula of each of t's terms.
func timeTerms(t *Timing, training bool) []Term {
	var ts terms
	if training {
		ts.addSeconds("compute per step", "6·N·tokens (N less an untied input embedding, a lookup) + 12·L·h·s attention (+recompute: 2·(N − vocabulary layers) + attention/3, Narayanan et al. 2021 eq. 3) ÷ (GPUs · peak · MFU; fp8 training: 2·peak, MFU·fp8Gain/2, fp8Gain = T/(T − linear GEMMs/2 + casts))", t.Compute)
		ts.addSeconds("pipeline bubble per step", "1F1B: compute·(pp−1)/(micro-batches·vp) (Narayanan et al. 2021)", t.Bubble)
		ts.addSeconds("tensor-parallel comm per step", "4 all-reduces of s·b·h per layer over PCIe (Shoeybi et al. 2019)", t.TPComm)
		ts.addSeconds("pipeline comm per step", "2·s·b·h bytes per micro-batch over the network", t.PPComm)
		ts.addSeconds("data-parallel comm per step (total)", "ring all-reduce 2(d−1)/d·grad bytes (ZeRO-3: 1.5×)", t.DPComm)
		ts.addSeconds("data-parallel comm per step (exposed)", "total − backward overlap window", t.Exposed)
		ts.addSeconds("expert-parallel all-to-all per step (total)", "moe: micro-batches · MoE layers/pp · passes · s·b/(tp·cp)·k·h·bytes, off-node share (n−1)/n over the node's NIC (node-limited routing: M of k copies), the rest over NVLink (GShard; DeepSeek-V3 §3.2.2)", t.EPComm)
		ts.addSeconds("expert-parallel all-to-all per step (exposed)", "all of it, or with overlap what the MoE layers' compute does not hide (DualPipe)", t.EPExposed)
		ts.addSeconds("offload per step", "4·params/PCIe + CPU Adam (ZeRO-Offload)", t.Offload)
		ts.addSeconds("step", "compute + bubble + TP + PP + exposed DP + exposed EP + offload", t.StepTime)
		ts.addSeconds("steady-state total", "step · steps (what a steps × seconds-per-step projection gives)", t.StepTime*t.Steps)
		ckpt := "run shorter than one checkpoint interval"
		if t.CheckpointEvery > 0 {
			ckpt = fmt.Sprintf("checkpoint every %.0fs", t.CheckpointEvery)
		}
		ts.addSeconds("total", fmt.Sprintf("step · steps ÷ goodput (%.3f: hardware interruptions at 2.2e-5 per GPU-hour (Llama 3 §3.3.4), each a restart + lost work; %s; Young/Daly)", t.Goodput, ckpt), t.Seconds)
		return ts
	}
	ts.addSeconds("time to first token", "prefill FLOPs ÷ (tp · peak · prefill MFU)", t.TTFT)
	ts.addSeconds("time per output token", "max(bytes read ÷ (HBM bw · MBU), FLOPs ÷ (tp · peak · decode MFU)) + all-reduce latency", t.TPOT)
	ts.addSeconds("request latency", "TTFT + output tokens · TPOT", t.Latency)
	return ts
}

// flopsPerToken is the training work per token: 6·N for the weights
// (Kaplan et al. 2020 §2.1; Hoffmann et al. 2022 "C ≈ 6ND") with N the
// active parameters of an MoE (Fedus et al. 2022), plus 12·L·(heads·headDim)·s for
// attention scores (Chowdhery et al. 2022 "PaLM", Appendix B). LoRA skips
// the frozen weights' gradients: 2N forward + 2N backward (Hu et al. 2021).
// Full recomputation adds a forward pass of the transformer layers
// (Korthikanti et al. 2022 §5: 2N + the attention forward), less the
// vocabulary layers: checkpointing wraps each transformer block, so the
// logit layer is not recomputed and the embedding lookup has no FLOPs
// (model FLOPs 72·B·s·L·h²·(1 + s/6h + V/12hL), Korthikanti et al.
// Appendix A; with full recomputation 96·B·s·L·h²·(1 + s/6h + V/16hL),
// Narayanan et al. 2021 eq. 3: the vocabulary term 6·B·s·V·h in both);
// selective recomputation adds the attention forward.
func (w *workload) flopsPerToken(rc Recompute) (model, total float64) {
	attn := 12 * float64(w.arch.Layers) * w.attnWidth() * float64(w.SequenceLength)
	weights := 6 * w.matmulParams()
	if w.Task == LoRA || w.Task == QLoRA {
		weights = 4 * w.matmulParams()
	}
	model = weights + attn
	switch {
	case rc == RecomputeFull:
		total = model + 2*(w.active-w.embed) + attn/3
	case rc == RecomputeSelective && w.Attention == Eager:
		total = model + attn/3
	default:
		total = model
	}
	return model, total
}

// matmulParams is the parameters a token is multiplied by: the active ones
// less an untied input embedding, which is a table lookup (no FLOPs; its
// backward a scatter-add of the token's gradient). The vocabulary enters
// the FLOPs once, as the logit layer: Narayanan et al. 2021 eq. (3) and
// Korthikanti et al. 2022 Appendix A count 6·B·s·V·h for it and nothing for
// the embedding. A tied embedding is the logit layer's weight, counted once
// already.
func (w *workload) matmulParams() float64 {
	if t := w.arch.TiedEmbeddings; t != nil && *t {
		return w.active
	}
	return w.active - w.embed/2
}

// logitParams is the output layer's weights, V·h: the part of
// matmulParams a token meets only where its logits are computed.
func (w *workload) logitParams() float64 {
	if t := w.arch.TiedEmbeddings; t != nil && *t {
		return w.embed
	}
	return w.embed / 2
}

// qloraSlowdown is the dequantisation cost of 4-bit base weights: QLoRA
// steps run 1.2–1.4× slower than 16-bit LoRA (Dettmers et al. 2023 and
// Hugging Face PEFT benchmarks); weak, flagged in the output.
const qloraSlowdown = 1.3

// trainingTime estimates a plan's time on hardware hw.
func (w *workload) trainingTime(p Plan, hw *hardware) Timing {
	var t Timing
	G := float64(p.GPUs())
	dp, tp, pp := float64(p.DP), float64(p.TP), float64(p.PP)
	_, fpt := w.flopsPerToken(p.Recompute)
	stepTokens := float64(w.SequenceLength) * float64(w.GlobalBatch)
	rate := hw.peak * hw.mfu
	t.RatePerGPU, t.MFU, t.Steps = rate, hw.mfu, w.steps
	t.Compute = stepTokens * fpt / (G * rate)
	if w.Task == QLoRA {
		t.Compute *= qloraSlowdown
	}
	// 1F1B pipeline bubble: (p−1)/m of the ideal time (Narayanan et al. 2021
	// "Efficient Large-Scale Language Model Training on GPU Clusters", §2.2).
	micro := math.Ceil(float64(w.GlobalBatch) / (dp * float64(p.MicroBatch)))
	// Interleaving v model chunks per rank divides it by v (§2.2.2).
	t.Bubble = t.Compute * (pp - 1) / (micro * float64(p.vp()))

	// Tensor parallelism: 2 all-reduces forward and 2 backward per layer
	// (Shoeybi et al. 2019 §3; one more pair under full recomputation) of
	// s·b·h 16-bit activations. Inside an NVLink domain this is part of the
	// calibrated MFU (the calibration runs used TP 8); over PCIe it is not.
	if p.TP > 1 && hw.pcie {
		ars := 4.0
		if p.Recompute == RecomputeFull {
			ars = 6
		}
		bytes := float64(w.SequenceLength) * float64(p.MicroBatch) * float64(w.arch.Hidden) * 2
		perAR := 2 * (tp - 1) / tp * bytes / hw.intra
		t.TPComm = micro * math.Ceil(float64(w.arch.Layers)/pp) * ars * perAR
	}

	// Pipeline stages on different nodes send each micro-batch's
	// activations forward and gradients back over the network: s·b·h
	// 16-bit values per boundary (Narayanan et al. 2021 §4.1; the
	// scatter/gather optimisation splits it over the TP ranks, which share
	// the node's NIC). Not overlapped: conservative.
	if p.PP > 1 && p.TP*p.PP > p.GPUsPerNode {
		bytes := float64(w.SequenceLength) * float64(p.MicroBatch) * float64(w.arch.Hidden) * 2
		t.PPComm = micro * 2 * bytes / hw.inter
	}

	// Data parallelism: a ring all-reduce moves 2(d−1)/d of the gradient
	// shard per rank (Patarasuk & Yuan 2009); ZeRO-1/2 move the same, ZeRO-3
	// 1.5× (Rajbhandari et al. 2020, §7), and per micro-batch since the
	// weights are gathered again for each.
	if p.DP > 1 {
		gradBytes := 2.0
		if w.Precision == FP32 {
			gradBytes = 4
		}
		// resident: one rank's parameters before ZeRO (MoE experts split
		// by ep, whose gradients are reduced over dp/ep ranks).
		resident := w.residentParams(p)
		if w.Task == LoRA || w.Task == QLoRA {
			gradBytes, resident = 4, w.adapters/(tp*pp)
		}
		// shard is the all-reduce-equivalent bytes per rank per step.
		shard := gradBytes * resident
		window := t.Compute * 2 / 3 / micro // DDP overlaps the last backward
		if p.ZeRO >= 3 {
			// All-gather the weights forward and backward, reduce-scatter the
			// gradients, each (d−1)/d of its size: half an all-reduce each.
			weightBytes := 2 * w.residentParams(p)
			if w.Task == LoRA || w.Task == QLoRA {
				weightBytes = w.Precision.bytes() * w.params / (tp * pp) // frozen base, sharded by FSDP
			}
			shard = micro * (2*weightBytes + shard) / 2
			window = t.Compute // prefetch overlaps forward and backward
		}
		// Layout: TP innermost, then DP, then PP (Megatron's order), so a
		// node holds dpLocal ranks of each DP group.
		perNode := float64(p.GPUsPerNode)
		dpLocal := math.Max(1, math.Min(dp, perNode/tp))
		nodesSpanned := dp / dpLocal
		intra := 0.0
		if dpLocal > 1 {
			intra = 2 * (dpLocal - 1) / dpLocal * shard / hw.intra
		}
		inter := 0.0
		if nodesSpanned > 1 {
			groups := perNode / dpLocal // DP groups sharing the node's NIC
			inter = 2 * (nodesSpanned - 1) / nodesSpanned * shard * groups / hw.inter
		}
		t.DPComm = intra + inter
		// Overlap with backward (Li et al. 2020 "PyTorch Distributed", §3.2.3
		// gradient bucketing).
		t.Exposed = math.Max(0, t.DPComm-window)
	}

	t.EPComm, t.EPExposed = w.expertAllToAll(p, hw, micro, t.Compute)

	// CPU offload: gradients down and weights up over PCIe, then the CPU
	// optimizer step; not overlapped.
	if p.Offload {
		params := w.params / (tp * pp * dp)
		if w.Task == LoRA || w.Task == QLoRA {
			params = w.adapters / (tp * pp * dp)
		}
		t.Offload = 4*params/(pcieHostGBs*1e9) + params*float64(p.GPUsPerNode)/cpuAdamParamsPerSec
	}
	// Parameter offload streams the 16-bit weight partitions in for the
	// forward and the backward of every micro-batch (ZeRO-Infinity), not
	// overlapped: conservative.
	if p.OffloadParams {
		t.Offload += micro * 2 * 2 * w.params / (tp * pp * dp) / (pcieHostGBs * 1e9)
	}
	t.StepTime = t.Compute + t.Bubble + t.TPComm + t.PPComm + t.Exposed + t.EPExposed + t.Offload
	steady := t.StepTime * w.steps
	t.Seconds, t.CheckpointEvery = steady, 0
	if steady > 0 {
		// Hardware interruptions restart the whole synchronous job: rate ∝
		// GPUs; checkpoints of the full states at the nodes' write rate.
		bw, restart := hw.ckptBW, hw.restart
		if bw <= 0 {
			bw = defaultCheckpointGBs * 1e9
		}
		if restart <= 0 {
			restart = defaultRestart.Seconds()
		}
		delta := w.checkpointBytes() / (float64(max(1, p.Nodes)) * bw)
		t.Seconds, t.CheckpointEvery = youngDaly(steady, G*hardwareInterruptionsPerGPUHour, delta, restart)
	}
	t.Goodput = 1
	if t.Seconds > 0 {
		t.Goodput = steady / t.Seconds
	}
	t.FLOPs = fpt * stepTokens * w.steps
	return t
}

// expertAllToAll is an MoE plan's token exchange per step. Each MoE layer
// sends every token's hidden state to the ranks of its k routed experts
// (dispatch) and brings the k results back (combine), forward and again
// for the gradients in the backward pass, and once more forward under full
// recomputation (Lepikhin et al. 2020 "GShard" §2.2; Fedus et al. 2022
// "Switch Transformers" §2.2; Megatron-Core's alltoall dispatcher). With
// FP8 the dispatch is sent in FP8 and the combine in BF16 (DeepSeek-V3
// report §3.3.3). The EP group spans ceil(etp·ep / GPUs per node) nodes
// (etp = tp when carved out of the data-parallel ranks, 1 when folded); with balanced routing a copy lands
// off-node with probability (n−1)/n and crosses the node's NIC, shared by
// its GPUs, and the rest moves over NVLink. Without overlap (Megatron-Core
// runs the all-to-all on the compute stream) it is all exposed; with it
// (DeepSeek-V3's DualPipe, §3.2.1) only what exceeds the compute of the
// stage's MoE layers shows.
func (w *workload) expertAllToAll(p Plan, hw *hardware, micro, compute float64) (total, exposed float64) {
	moe := w.moeLayers()
	if moe == 0 || p.ep() <= 1 {
		return 0, 0
	}
	tokens := float64(w.SequenceLength) * float64(p.MicroBatch) / float64(p.TP*p.cp())
	k, h := float64(w.arch.ActiveExperts), float64(w.arch.Hidden)
	dispatch := 2.0
	if w.Precision == FP8 {
		dispatch = 1
	}
	fwd := tokens * k * h * (dispatch + 2)
	bwd := tokens * k * h * 4
	perLayer := fwd + bwd
	if p.Recompute == RecomputeFull {
		perLayer += fwd
	}
	spanNodes := math.Ceil(float64(p.etp()*p.ep()) / float64(p.GPUsPerNode))
	off := 0.0
	if spanNodes > 1 {
		off = (spanNodes - 1) / spanNodes
	}
	// Network copies per token: k·(n−1)/n, or with node-limited routing
	// one per remote target node, M·(n−1)/n, forwarded inside the node
	// over NVLink, where all k copies then move.
	netShare, linkShare := off, 1-off
	if m := w.arch.RouteNodes; m > 0 && off > 0 {
		netShare = math.Min(float64(m), math.Min(k, spanNodes)) / k * off
		linkShare = 1
	}
	perLayerTime := perLayer*netShare*float64(p.GPUsPerNode)/hw.inter + perLayer*linkShare/hw.intra
	layers := math.Ceil(float64(moe) / float64(p.PP))
	total = micro * layers * perLayerTime
	exposed = total
	if p.OverlapExpertComm {
		exposed = math.Max(0, total-compute*float64(moe)/float64(w.arch.Layers))
	}
	return total, exposed
}

// servingTime estimates one replica of tp GPUs serving batch sequences.
// Decode reads every weight and the batch's KV cache once per step, so it
// is bound by memory bandwidth (Pope et al. 2022 §2; Databricks 2023); it
// is compute-bound only at large batch. Prefill is compute-bound.
func (w *workload) servingTime(tp, batch int, hw *hardware) Timing {
	var t Timing
	T := float64(tp)
	weights, quant := w.servingWeights(tp)
	s := w.Serving
	// Mean context during decode: the prompt plus half the output.
	ctx := float64(s.InputTokens) + float64(s.OutputTokens)/2
	kv := float64(batch) * ctx * w.kvBytes / float64(min(tp, w.arch.KVHeads))
	memTime := (weights + quant + kv) / (hw.bw * mbu)
	attnFlops := 4 * float64(w.arch.Layers) * w.attnWidth() * ctx // QKᵀ and AV per token
	computeTime := float64(batch) * (2*w.matmulParams() + attnFlops) / (T * hw.peak * decodeMFU)
	step := math.Max(memTime, computeTime)
	if tp > 1 {
		lat := smallAllReduceNVLink
		if hw.pcie {
			lat = smallAllReducePCIe
		}
		step += 2 * float64(w.arch.Layers) * lat // 2 all-reduces per layer
	}
	// Prefill runs every prompt token through the blocks but projects only
	// the last position onto the vocabulary: engines compute logits for the
	// positions they sample (vLLM's logits_indices; TensorRT-LLM's context
	// logits are off unless requested). docs/advisor.md, "The models".
	in := float64(s.InputTokens)
	logit := 2 * w.logitParams()
	prefillFlops := in*(2*w.matmulParams()-logit+2*float64(w.arch.Layers)*w.attnWidth()*in) + logit
	t.TTFT = prefillFlops / (T * hw.peak * prefillMFU)
	t.TPOT = step
	t.Latency = t.TTFT + float64(s.OutputTokens)*step
	// Continuous batching (Yu et al. 2022 "Orca"; vLLM): each request costs
	// its prefill plus its share of decode steps.
	perRequest := t.TTFT + float64(s.OutputTokens)*step/float64(batch)
	t.TokensPerSecond = float64(s.OutputTokens) / perRequest
	t.StepTime = step
	t.RatePerGPU = hw.peak * prefillMFU
	t.MFU = prefillMFU
	return t
}
