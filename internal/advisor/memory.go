package advisor

import (
	"fmt"
	"math"
	"strings"
)

// Recompute is the activation recomputation (gradient checkpointing) mode.
type Recompute string

// Recomputation modes (Korthikanti et al. 2022, §4 and §5).
const (
	RecomputeNone Recompute = "none"
	// RecomputeSelective recomputes only the attention scores, softmax and
	// dropout: the 5·a·s² term. With FlashAttention it saves nothing more,
	// since those are never stored.
	RecomputeSelective Recompute = "selective"
	// RecomputeFull stores each layer's input and recomputes the layer in
	// the backward pass: one more forward pass of compute.
	RecomputeFull Recompute = "full"
)

// Plan is one way to lay the workload out on GPUs.
type Plan struct {
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpusPerNode"`
	// TP, PP and DP are the tensor, pipeline and data parallel degrees;
	// TP·PP·DP is every GPU of a training plan, TP·replicas of a serving one.
	TP int `json:"tp"`
	PP int `json:"pp"`
	DP int `json:"dp"`
	// ZeRO is the ZeRO stage (Rajbhandari et al. 2020): 0 is plain DDP,
	// 1 shards optimizer states, 2 also gradients, 3 also weights (PyTorch
	// FSDP FULL_SHARD is stage 3).
	ZeRO      int       `json:"zero"`
	Recompute Recompute `json:"recompute,omitempty"`
	// Offload moves optimizer states and the optimizer step to host memory
	// (ZeRO-Offload, Ren et al. 2021).
	Offload bool `json:"offload,omitempty"`
	// OffloadParams also keeps the (ZeRO-3-sharded) weights in host memory
	// and streams them in per layer (ZeRO-Infinity offload_param; FSDP
	// CPUOffload(offload_params=True)).
	OffloadParams bool `json:"offloadParams,omitempty"`
	// CP is the context-parallel degree: each sequence split over CP GPUs
	// (Megatron-Core context parallelism, ring attention); 0 or 1 is none.
	CP int `json:"cp,omitempty"`
	// EP is the expert-parallel degree of an MoE (0 or 1: none): each
	// MoE layer's routed experts are split over EP ranks of the
	// data-parallel group, which exchange tokens by all-to-all
	// (Lepikhin et al. 2020 "GShard"; Megatron-Core MoE).
	EP int `json:"ep,omitempty"`
	// VP is the virtual pipeline stages per pipeline rank (Megatron's
	// interleaved 1F1B schedule); 0 or 1 is plain 1F1B.
	VP int `json:"vp,omitempty"`
	// OverlapExpertComm hides the all-to-all behind another micro-batch's
	// compute (DeepSeek-V3's DualPipe; Megatron-Core
	// --overlap-moe-expert-parallel-comm).
	OverlapExpertComm bool `json:"overlapExpertComm,omitempty"`
	MicroBatch        int  `json:"microBatch,omitempty"`
	// Serving: model replicas and sequences in flight per replica.
	Replicas int `json:"replicas,omitempty"`
	Batch    int `json:"batch,omitempty"`
}

// GPUs is the plan's GPU count.
func (p Plan) GPUs() int { return p.Nodes * p.GPUsPerNode }

// cp is the context-parallel degree, at least 1.
func (p Plan) cp() int { return max(1, p.CP) }

// ep is the expert-parallel degree, at least 1.
func (p Plan) ep() int { return max(1, p.EP) }

// vp is the virtual pipeline stages per rank, 1 when not interleaved.
func (p Plan) vp() int {
	if p.PP < 2 {
		return 1
	}
	return max(1, p.VP)
}

// etp is the expert tensor-parallel degree. When ep divides dp the EP
// group is carved out of the data-parallel ranks and the experts are also
// split by TP (Megatron-Core's default, --expert-tensor-parallel-size =
// TP); otherwise the experts are folded over the TP×DP ranks with ETP 1
// (MoE Parallel Folding, Liu et al. 2025, arXiv 2504.14960).
func (p Plan) etp() int {
	if p.DP%p.ep() == 0 {
		return max(1, p.TP)
	}
	return 1
}

// String is the plan in one short line, e.g. "tp8 pp1 dp4 zero3 full mb1".
func (p Plan) String() string {
	if p.Replicas > 0 {
		noun := "replicas"
		if p.Replicas == 1 {
			noun = "replica"
		}
		return fmt.Sprintf("tp%d, %d %s, batch %d", p.TP, p.Replicas, noun, p.Batch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tp%d pp%d dp%d", p.TP, p.PP, p.DP)
	if p.cp() > 1 {
		fmt.Fprintf(&b, " cp%d", p.CP)
	}
	if p.vp() > 1 {
		fmt.Fprintf(&b, " vp%d", p.VP)
	}
	if p.ep() > 1 {
		fmt.Fprintf(&b, " ep%d", p.EP)
		if p.OverlapExpertComm {
			b.WriteString(" a2a-overlap")
		}
	}
	fmt.Fprintf(&b, " zero%d", p.ZeRO)
	if p.Recompute != RecomputeNone && p.Recompute != "" {
		b.WriteString(" " + string(p.Recompute) + "-recompute")
	}
	if p.Offload {
		b.WriteString(" offload")
	}
	if p.OffloadParams {
		b.WriteString(" offload-params")
	}
	fmt.Fprintf(&b, " mb%d", p.MicroBatch)
	return b.String()
}

// Memory is what one GPU holds, the largest pipeline stage's share, in
// bytes (JSON numbers; the unit is in each field's name).
type Memory struct {
	WeightsBytes          int64 `json:"weightsBytes"`
	GradientsBytes        int64 `json:"gradientsBytes"`
	OptimizerBytes        int64 `json:"optimizerBytes"`
	ActivationsBytes      int64 `json:"activationsBytes"`
	KVCacheBytes          int64 `json:"kvCacheBytes"`
	AdaptersBytes         int64 `json:"adaptersBytes"`
	AdapterOptimizerBytes int64 `json:"adapterOptimizerBytes"`
	QuantConstantsBytes   int64 `json:"quantConstantsBytes"`
	// OverheadBytes is the CUDA context, library workspaces and NCCL
	// buffers.
	OverheadBytes int64 `json:"overheadBytes"`
	// MarginBytes is what the caching allocator loses to fragmentation
	// (training) or what the serving engine leaves unused (vLLM's
	// gpu_memory_utilization).
	MarginBytes   int64 `json:"marginBytes"`
	TotalBytes    int64 `json:"totalBytes"`
	CapacityBytes int64 `json:"capacityBytes"`
	// HostBytesPerNode is the host memory offload needs on each node
	// (DeepSpeed's "per CPU" estimate).
	HostBytesPerNode int64 `json:"hostBytesPerNode,omitempty"`
	// Terms is every memory term with the formula it comes from (explain
	// and plan output only).
	Terms []Term `json:"terms,omitempty"`
}

// Term is one summand of a memory or time estimate with the name of its
// formula (see docs/advisor.md), for --explain and --plan.
type Term struct {
	Name    string  `json:"name"`
	Formula string  `json:"formula"`
	Bytes   float64 `json:"bytes,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

// terms collects Terms; a nil *terms (the search's hot path) records
// nothing.
type terms []Term

// add records a memory term; it inlines to a nil check on the hot path.
func (t *terms) add(name, formula string, bytes float64) {
	if t != nil {
		t.push(Term{Name: name, Formula: formula, Bytes: bytes})
	}
}

func (t *terms) addSeconds(name, formula string, s float64) {
	if t != nil {
		t.push(Term{Name: name, Formula: formula, Seconds: s})
	}
}

func (t *terms) push(term Term) {
	if term.Bytes != 0 || term.Seconds != 0 {
		*t = append(*t, term)
	}
}

// mem is Memory in float bytes, for the hot path.
type mem struct {
	weights, grads, optim, acts, kv, adapters, adapterOpt, quant, overhead, margin float64
	// hostPerNode is the offloaded host memory per node.
	hostPerNode float64
	// gather is the part of weights and grads that ZeRO-3 gathers per layer,
	// kept apart for tests against the ZeRO paper's model-state figures.
	gather float64
}

func (m mem) total() float64 {
	return m.weights + m.grads + m.optim + m.acts + m.kv + m.adapters + m.adapterOpt + m.quant + m.overhead + m.margin
}

func (m mem) export(capacity float64, t terms) Memory {
	b := func(f float64) int64 { return int64(math.Round(f)) }
	return Memory{
		WeightsBytes: b(m.weights), GradientsBytes: b(m.grads), OptimizerBytes: b(m.optim), ActivationsBytes: b(m.acts),
		KVCacheBytes: b(m.kv), AdaptersBytes: b(m.adapters), AdapterOptimizerBytes: b(m.adapterOpt), QuantConstantsBytes: b(m.quant),
		OverheadBytes: b(m.overhead), MarginBytes: b(m.margin), TotalBytes: b(m.total()), CapacityBytes: b(capacity),
		HostBytesPerNode: b(m.hostPerNode), Terms: t,
	}
}

// Memory constants.
const (
	gib = float64(1 << 30)
	// usableMemory is the share of a GPU's nominal memory that CUDA reports
	// as its total (ECC and driver reservations), before any context:
	// PyTorch reports "79.11 GiB total capacity" on an 80 GiB H100
	// (vllm-project/vllm#27508), "79.25 GiB" on an A100 80GB
	// (levihsu/OOTDiffusion#235) and "39.50 GiB" on an A100 40GB
	// (TianheWu/CoSeR#10): 98.9–99.1%; we take 99%.
	usableMemory = 0.99
	// cudaContext is the CUDA context, cuBLAS/cuDNN workspaces and the
	// PyTorch caching allocator's first blocks: 0.3–0.5 GiB for a bare
	// context with CUDA lazy loading (CUDA 11.7+; PyTorch "CUDA semantics"
	// notes) plus workspaces; we take 1 GiB.
	cudaContext = 1 * gib
	// ncclBuffers are NCCL's communication buffers, 4 MiB per channel per
	// peer by default (NCCL_BUFFSIZE, NCCL docs); 0.5 GiB covers 8-way
	// rings and trees with up to 16 channels.
	ncclBuffers = 0.5 * gib
	// trainMargin is the caching allocator's fragmentation allowance, a
	// share of what is allocated (not of the card): the PyTorch allocator
	// reports 5–10% reserved-but-unallocated memory for LLM training
	// (PyTorch memory-snapshot docs; we take 7%).
	trainMargin = 0.07
	// serveMargin is what vLLM leaves free: gpu_memory_utilization = 0.9
	// by default (vLLM engine arguments).
	serveMargin = 0.10
	// prefillChunk bounds the tokens of one prefill step (vLLM chunked
	// prefill, max_num_batched_tokens 8192 on large GPUs).
	prefillChunk = 8192
)

// trainingBytes returns the bytes per parameter of weights, gradients and
// optimizer states for full training (Rajbhandari et al. 2020 "ZeRO", §3.1:
// mixed-precision Adam keeps fp16 weights and gradients, 2Ψ + 2Ψ, and fp32
// master weights, momentum and variance, KΨ with K = 12).
func trainingBytes(p Precision, o Optimizer) (weights, grads, optim float64) {
	mixed := p != FP32
	switch {
	case p == FP8:
		// Transformer Engine keeps bf16 weights and caches their fp8 copy
		// (NVIDIA TE docs, "FP8 primer"); gradients are bf16.
		weights, grads = 3, 2
	case mixed:
		weights, grads = 2, 2
	default:
		weights, grads = 4, 4
	}
	master := 0.0
	if mixed {
		master = 4
	}
	switch o {
	case AdamW:
		optim = master + 8 // fp32 m and v
	case Adam8bit:
		// Block-wise 8-bit states: 1 byte each for m and v (Dettmers et al.
		// 2022 "8-bit Optimizers via Block-wise Quantization"); the
		// per-block constants are < 1%.
		optim = master + 2
	case SGD:
		optim = master + 4 // fp32 momentum
	case Adafactor:
		// Factored second moments, O(rows+cols) per matrix, and no first
		// moment by default (Shazeer & Stern 2018, §3–4): ≈ 0 per parameter.
		optim = master + 0.05
	}
	return weights, grads, optim
}

// adapterOptimBytes is optimizer bytes per LoRA parameter. PEFT keeps
// adapters in fp32 (autocast_adapter_dtype, PEFT ≥ 0.12), so there is no
// separate master copy.
func adapterOptimBytes(o Optimizer) float64 {
	switch o {
	case Adam8bit:
		return 2
	case SGD:
		return 4
	case Adafactor:
		return 0.05
	}
	return 8
}

// activationPerLayer is the activation bytes one layer stores for one
// sequence, under tensor parallelism t with sequence parallelism (Megatron
// enables it with TP). Korthikanti et al. 2022 "Reducing Activation
// Recomputation in Large Transformer Models", Table 2: s·b·h·(34 + 5·a·s/h)/t
// with TP+SP, s·b·h·34/t with selective recomputation, and 2·s·b·h/t for the
// stored layer input under full recomputation. The 34 is 11 (attention) +
// 19 (a 4h GELU MLP: 2 input + 8 fc1 out + 8 GELU out + 1 dropout mask) +
// 4 (layer norms); for a gated MLP of width f the MLP term is 3 + 8·f/h
// (gate, up, activation and product, 2 bytes each), and for MoE it grows
// with the active experts. FlashAttention (Dao et al. 2022) never stores
// the 5·a·s² scores. Trained without dropout (Model.Dropout 0), the two
// 1-byte hidden masks go (34 → 32) and eager attention keeps 2·a·s², not
// 5·a·s².
func (w *workload) activationPerLayer(seq int, t int, rc Recompute) float64 {
	s, h := float64(seq), float64(w.arch.Hidden)
	t64 := float64(t)
	if rc == RecomputeFull {
		return 2 * s * h / t64
	}
	per := s * h * (w.attnActivationTerm() + 4 + w.mlpActivationTerm())
	if !w.dropout {
		// No dropout: the attention block's and the MLP's output masks
		// (1 byte per element each) are not stored.
		per -= 2 * s * h
	}
	if w.Precision == FP8 {
		// Transformer Engine keeps the FP8 cast of each GEMM input for the
		// weight gradient (1 byte, not 2): the QKV, fc1 and fc2 inputs
		// shrink by 1, 1 and f/h; the attention output is kept twice,
		// bf16 by the attention kernel and FP8 by the projection (+1).
		per -= s * h * (1 + w.fc2InputTerm()/2)
	}
	if w.Attention == Eager && rc == RecomputeNone {
		// Scores' softmax 2·a·s², its dropout mask a·s² and the
		// dropped-out probabilities 2·a·s²; without dropout the softmax
		// output is the one tensor kept.
		per += w.eagerScoreBytes() * float64(w.arch.Heads) * s * s
	}
	return per / t64
}

// eagerScoreBytes is eager attention's bytes per score element:
// Korthikanti et al.'s 5 (softmax output 2, dropout mask 1, dropout
// output 2), 2 without dropout.
func (w *workload) eagerScoreBytes() float64 {
	if w.dropout {
		return 5
	}
	return 2
}

// attnActivationTerm is the attention block's bytes per token per hidden
// unit: Korthikanti et al.'s 11 (QKV input 2, Q and K 4, V 2, projection
// input 2, dropout mask 1) with grouped-query attention's K and V at
// kv/a of Q's size (Ainslie et al. 2023): 7 + 4·kv/a, 11 when kv = a.
func (w *workload) attnActivationTerm() float64 {
	kv := float64(w.arch.KVHeads) / float64(w.arch.Heads)
	if w.arch.Heads == 0 || kv <= 0 {
		kv = 1
	}
	return 7 + 4*kv
}

// fc2InputTerm is the second MLP GEMM's input in bf16 bytes per token per
// hidden unit, mean over layers (2·f/h; MoE: per routed and shared expert
// visited at the expert width).
func (w *workload) fc2InputTerm() float64 {
	h := float64(w.arch.Hidden)
	dense := 2 * float64(w.arch.FFN) / h
	moe := w.moeLayers()
	if moe == 0 {
		return dense
	}
	moeTerm := 2 * float64(w.arch.ExpertFFN) / h * float64(w.arch.ActiveExperts+w.arch.SharedExperts)
	L := float64(w.arch.Layers)
	return (float64(moe)*moeTerm + float64(w.arch.DenseLayers)*dense) / L
}

// mlpActivationTerm is the MLP's bytes per token per hidden unit, mean
// over layers: 3 + 4·f/h for a GELU MLP (fc1 out, GELU out, input, mask),
// 3 + 8·f/h gated (3 + 6·f/h with Megatron-Core's fused SwiGLU). An MoE layer stores this at the expert width f_e for
// each of the k routed and S shared experts a token visits, plus the k
// permuted copies of its input (2k; Megatron-Core's token permutation).
func (w *workload) mlpActivationTerm() float64 {
	h := float64(w.arch.Hidden)
	per := 4.0
	if w.gated {
		per = 8
		if w.Framework == "megatron" {
			// megatron/core/fusions/fused_bias_swiglu.py: SwiGLUFunction
			// saves its input (gate and up, 4·f/h) and fc2 saves its
			// input (2·f/h); SiLU's output is recomputed in backward.
			per = 6
		}
	}
	dense := 3 + per*float64(w.arch.FFN)/h
	moe := w.moeLayers()
	if moe == 0 {
		return dense
	}
	k := float64(w.arch.ActiveExperts)
	moeTerm := 3 + 2*k + per*float64(w.arch.ExpertFFN)/h*(k+float64(w.arch.SharedExperts))
	L := float64(w.arch.Layers)
	return (float64(moe)*moeTerm + float64(w.arch.DenseLayers)*dense) / L
}

// residentParams is the parameters one GPU holds before ZeRO shards them:
// the dense part split by tensor and pipeline parallelism, the routed
// experts also by expert parallelism (Megatron-Core: expert tensor
// parallelism = TP by default).
func (w *workload) residentParams(p Plan) float64 {
	mp := float64(p.TP) * float64(p.PP)
	return (w.params-w.routed)/mp + w.routed/(float64(p.PP)*float64(p.etp())*float64(p.ep()))
}

// largestLayer is the largest module's parameters on one TP rank, the
// unit ZeRO-3 gathers: DeepSpeed's largest_layer_params, the most
// parameters any one module holds itself (the embedding or output layer,
// or one MLP matrix), divided by the tensor-parallel degree.
func (w *workload) largestLayer(tp float64) float64 {
	h := float64(w.arch.Hidden)
	return math.Max(float64(w.arch.Vocab)*h, float64(max(w.arch.FFN, w.arch.ExpertFFN))*h) / tp
}

// trainingMemory is one GPU's memory for a training plan: the first
// pipeline stage, which holds the most in-flight micro-batches. capacity is
// the GPU's memory in bytes.
func (w *workload) trainingMemory(p Plan, capacity float64) mem {
	return w.trainingMemoryTerms(p, capacity, nil)
}

// trainingMemoryTerms is trainingMemory, recording each term in t when t
// is not nil.
func (w *workload) trainingMemoryTerms(p Plan, capacity float64, t *terms) mem {
	var m mem
	tp, pp, dp := float64(p.TP), float64(p.PP), float64(p.DP)
	perNode := float64(p.GPUsPerNode)
	shard := w.residentParams(p)           // parameters on one model-parallel rank
	partition := w.params / (tp * pp * dp) // one rank's ZeRO partition
	largest := w.largestLayer(tp)

	switch w.Task {
	case PreTrain, FullFineTune:
		wb, gb, ob := trainingBytes(w.Precision, w.Optimizer)
		// fp32 gradients for the optimizer step: DeepSpeed converts the
		// (partitioned) gradients to fp32 before the update (DeepSpeed
		// "Memory Requirements", note about gradients); 0 for fp32
		// training, where the gradients already are.
		g32 := 0.0
		if w.Precision != FP32 {
			g32 = 4
		}
		switch {
		case p.ZeRO >= 3:
			// DeepSpeed estimate_zero3_model_states_mem_needs: 4·largest
			// layer (16-bit parameters gathered and their gradients) plus
			// 18·params/GPUs (2 fp16 weights + 16 fp32 weights, gradients,
			// momentum and variance) without offload, 2·params/GPUs with
			// the optimizer offloaded, nothing more with the parameters
			// offloaded too.
			m.gather = 4 * largest
			if wb == 4 && gb == 4 {
				m.gather = 8 * largest // fp32 training gathers fp32
			}
			m.weights = wb * partition
			m.grads = 0
			m.optim = (ob + g32) * partition
			host := 0.0
			if p.Offload {
				host += m.optim
				m.optim = 0
			}
			if p.OffloadParams {
				host += m.weights
				m.weights = 0
			}
			// Host: ZeRO.Init partitions on load, so per node the node's
			// GPUs' partitions, with DeepSpeed's 1.5 buffer factor.
			m.hostPerNode = host * perNode * hostBufferFactor
			t.add("weights (ZeRO-3 partition)", "zero3: wb·params/(tp·pp·dp)", m.weights)
			t.add("optimizer + fp32 grads (ZeRO-3 partition)", "zero3: (K+4)·params/(tp·pp·dp)", m.optim)
			t.add("gathered largest layer", "zero3: 4·largest_layer_params", m.gather)
			m.weights += m.gather
		default:
			m.weights, m.grads, m.optim = wb*shard, gb*shard, ob*shard
			// ZeRO partitions optimizer states (stage ≥ 1) and gradients (2)
			// across the data-parallel group (Rajbhandari et al. 2020, §5,
			// Figure 1). Stage 2 as DeepSpeed's
			// estimate_zero2_model_states_mem_needs counts it: the 16-bit
			// weights and gradients whole (4·params) plus 16·params/GPUs
			// (fp32 weights, gradients, momentum, variance).
			// With expert parallelism the experts' states are sharded over
			// the expert-data-parallel group (dp/ep) and the rest over dp:
			// params/(tp·pp·dp) either way.
			if p.ZeRO >= 1 {
				m.optim = ob * partition
			}
			if p.ZeRO == 2 {
				m.optim += g32 * partition
			}
			if p.Offload {
				// ZeRO-Offload: gradients and optimizer on the host, 2·params
				// on the GPU; the host holds max(4·GPUs per node, 16)·params
				// (fp32 load per process, or the fp32 states) ×1.5.
				m.grads, m.optim = 0, 0
				m.hostPerNode = shard * math.Max(4*perNode, ob+g32) * hostBufferFactor
			}
			formula := "ddp: (2+2+K)·params/(tp·pp) (MoE: routed experts also /ep)"
			switch p.ZeRO {
			case 1:
				formula = "zero1: 2+2 + K/dp per param (Rajbhandari et al. 2020)"
			case 2:
				formula = "zero2: 4·params + 16·params/GPUs (DeepSpeed estimator)"
			}
			if p.Offload {
				formula = "zero-offload: 2·params on GPU (DeepSpeed estimator)"
			}
			t.add("weights", formula, m.weights)
			t.add("gradients", formula, m.grads)
			t.add("optimizer states", formula, m.optim)
		}
	case LoRA, QLoRA:
		base := w.Precision.bytes()
		if w.Task == QLoRA {
			lin := (w.params - w.embed) / (tp * pp)
			m.weights, m.quant = w.quantWeights(w.Precision, lin, w.embed/(tp*pp))
		} else {
			m.weights = base * shard
		}
		if p.ZeRO >= 3 {
			m.weights /= dp
			m.quant /= dp
			if p.OffloadParams {
				m.hostPerNode += (m.weights + m.quant) * perNode * hostBufferFactor
				m.weights, m.quant = 0, 0
			}
			m.gather = 2 * largest * base
		}
		t.add("frozen base weights", "lora: precision bytes·params (qlora: format bytes)", m.weights)
		t.add("quantisation constants", "format scales (see quantWeights)", m.quant)
		t.add("gathered largest layer", "zero3: 2·base bytes·largest_layer_params", m.gather)
		m.weights += m.gather
		a := w.adapters / (tp * pp)
		// PEFT keeps LoRA adapters and their gradients in fp32; the QLoRA
		// recipe casts them to bf16 (artidoro/qlora qlora.py, get_accelerate_model).
		ab := 4.0
		if w.Task == QLoRA {
			ab = 2
		}
		m.adapters = ab * a
		m.grads = ab * a
		m.adapterOpt = adapterOptimBytes(w.Optimizer) * a
		if p.ZeRO >= 1 {
			m.adapterOpt /= dp
		}
		if p.ZeRO >= 2 {
			m.grads /= dp
		}
		if p.Offload {
			m.hostPerNode += m.adapterOpt * perNode * hostBufferFactor
			m.adapterOpt = 0
		}
		t.add("LoRA adapters", "lora: r·(in+out) per target matrix, fp32 (qlora bf16)", m.adapters)
		t.add("adapter gradients", "lora: adapter bytes·adapters", m.grads)
		t.add("adapter optimizer", "lora: optimizer bytes·adapters", m.adapterOpt)
	}

	// Activations. With 1F1B the first stage holds min(pp, m) micro-batches
	// of its L/pp layers (Korthikanti et al. 2022, §4.2.3): L layers' worth
	// when the pipeline is full. Context parallelism splits each sequence
	// over cp GPUs.
	seq := int(math.Ceil(float64(w.SequenceLength) / float64(p.cp())))
	micro := math.Ceil(float64(w.GlobalBatch) / (dp * float64(p.MicroBatch)))
	inflight := math.Min(pp, micro)
	if v := float64(p.vp()); v > 1 {
		// Interleaved 1F1B: the first rank warms up (p−1)·2 + (v−1)·p
		// chunks of L/(p·v) layers before its first backward, so it
		// holds p·(1 + (p−1)/(p·v)) micro-batches of L/p layers
		// (Narayanan et al. 2021 §2.2.2; Korthikanti et al. 2022 §4.2.3;
		// Megatron-Core schedules.py, get_num_warmup_microbatches).
		inflight = math.Min(pp*(1+(pp-1)/(pp*v)), micro)
	}
	layers := math.Ceil(float64(w.arch.Layers) / pp)
	perSeq := w.activationPerLayer(seq, p.TP, p.Recompute)
	m.acts = layers * inflight * float64(p.MicroBatch) * perSeq
	actFormula := "korthikanti: s·b·h·(34+5·a·s/h)/t per layer (GQA: attention 7+4·kv/a; gated MLP: 3+8·f/h, megatron 3+6·f/h; fp8: −(1+f/h); flash drops 5·a·s/h)"
	switch p.Recompute {
	case RecomputeFull:
		actFormula = "korthikanti full recompute: 2·s·b·h/t per layer"
	case RecomputeSelective:
		actFormula = "korthikanti selective: s·b·h·34/t per layer (gated MLP: 15+8·f/h)"
	}
	if !w.dropout && p.Recompute != RecomputeFull {
		actFormula += "; dropout 0: no masks, −2·s·b·h (eager scores 2·a·s², not 5)"
	}
	t.add("activations (stored layers)", actFormula, m.acts)
	if p.Recompute == RecomputeFull {
		// The layer being recomputed holds its full activations.
		re := float64(p.MicroBatch) * w.activationPerLayer(seq, p.TP, RecomputeSelective)
		reFormula := "korthikanti: one layer's s·b·h·34/t"
		if !w.dropout {
			reFormula = "korthikanti: one layer's s·b·h·34/t, dropout 0: −2·s·b·h (no masks)"
		}
		t.add("activations (layer being recomputed)", reFormula, re)
		m.acts += re
	}
	// Output logits in fp32 for the loss (Megatron and Hugging Face upcast
	// before cross-entropy), vocabulary-parallel over TP; materialised on the
	// last stage only, counted here as the conservative bound for pp = 1.
	if pp == 1 {
		lg := 4 * float64(seq) * float64(p.MicroBatch) * float64(w.arch.Vocab) / tp
		t.add("logits", "fp32 logits: 4·s·b·V/t (last stage)", lg)
		m.acts += lg
	}

	m.overhead = cudaContext
	if p.GPUs() > 1 {
		m.overhead += ncclBuffers
	}
	t.add("CUDA context + workspaces", "constant 1 GiB", cudaContext)
	t.add("NCCL buffers", "constant 0.5 GiB when GPUs > 1", m.overhead-cudaContext)
	m.margin = trainMargin * (m.total() - m.overhead)
	t.add("allocator fragmentation", "7% of allocated tensors", m.margin)
	return m
}

// quantWeights is the bytes of lin linear-layer parameters and embed
// embedding parameters stored in format f: 4-bit values packed two to a
// byte with the format's scales apart, embeddings and the output layer kept
// 16-bit (bitsandbytes and the GPTQ/AWQ kernels replace nn.Linear only).
func (w *workload) quantWeights(f Precision, lin, embed float64) (weights, quant float64) {
	weights = 2 * embed
	switch f {
	case NF4:
		// QLoRA (Dettmers et al. 2023, §3): NF4 with one fp32 absmax per 64
		// weights is 0.5 bit per parameter; double quantisation brings it
		// to 0.127 bit (the paper's recipe and bitsandbytes' default here).
		return weights + 0.5*lin, 0.127 / 8 * lin
	case INT4:
		// GPTQ/AWQ weight-only int4 (Frantar et al. 2023; Lin et al. 2024):
		// an fp16 scale and a packed 4-bit zero point per group of 128:
		// 2.5 bytes per 128 weights (AutoGPTQ/AutoAWQ qzeros+scales).
		return weights + 0.5*lin, 2.5 / 128 * lin
	case INT8:
		// LLM.int8()/SmoothQuant: per-channel fp16 scales, < 0.1%.
		return weights + lin, 0
	case FP8:
		// FP8 checkpoints (e.g. Llama 3.1 405B FP8, Neural Magic/vLLM
		// fp8): linear weights in e4m3 with a per-tensor or per-channel
		// fp32 scale; embeddings, norms and lm_head stay bf16.
		return weights + lin, 0
	}
	return w.Precision.bytes() * (lin + embed), 0
}

// hostBufferFactor is DeepSpeed's additional_buffer_factor for host memory
// (estimate_zero{2,3}_model_states_mem_needs).
const hostBufferFactor = 1.5

// servingWeights is one GPU's weights and quantisation constants at tensor
// parallel degree tp.
func (w *workload) servingWeights(tp int) (weights, quant float64) {
	t := float64(tp)
	weights, quant = w.quantWeights(w.Precision, (w.params-w.embed)/t, w.embed/t)
	return weights, quant
}

// kvPerSequence is one sequence's KV cache on one GPU at full context, at
// tensor parallel degree tp: KV heads split across TP ranks, replicated
// when TP exceeds them (vLLM).
func (w *workload) kvPerSequence(tp int) float64 {
	shards := float64(min(tp, w.arch.KVHeads))
	return w.kvBytes * float64(w.Serving.ContextLength) / shards
}

// servingMemory is one GPU's memory when tp GPUs hold a replica serving
// batch sequences.
func (w *workload) servingMemory(tp, batch int, capacity float64) mem {
	return w.servingMemoryTerms(tp, batch, capacity, nil)
}

// servingMemoryTerms is servingMemory, recording each term in t when t is
// not nil.
func (w *workload) servingMemoryTerms(tp, batch int, capacity float64, t *terms) mem {
	var m mem
	m.weights, m.quant = w.servingWeights(tp)
	m.kv = float64(batch) * w.kvPerSequence(tp)
	// Peak activations of one prefill chunk: hidden states and the MLP
	// intermediate, 2 bytes each, plus the chunk's logits in fp32 (vLLM
	// profiles this peak with a dummy forward pass).
	chunk := math.Min(prefillChunk, float64(batch)*float64(w.Serving.InputTokens))
	f := float64(w.arch.FFN)
	if w.moeLayers() > 0 {
		f = float64(w.arch.ExpertFFN) * float64(w.arch.ActiveExperts+w.arch.SharedExperts)
	}
	m.acts = chunk * (4*float64(w.arch.Hidden) + 4*f) / float64(tp)
	m.acts += 4 * float64(min(batch, prefillChunk)) * float64(w.arch.Vocab) / float64(tp)
	m.overhead = cudaContext
	if tp > 1 {
		m.overhead += ncclBuffers
	}
	m.margin = serveMargin * capacity
	t.add("weights", "format bytes·params/tp (quantWeights)", m.weights)
	t.add("quantisation constants", "format scales (quantWeights)", m.quant)
	t.add("KV cache", "2·layers·kvHeads·headDim·bytes·context·batch/min(tp,kvHeads)", m.kv)
	t.add("prefill activations + logits", "chunk·(4h+4f)/tp + 4·batch·V/tp", m.acts)
	t.add("CUDA context + NCCL", "1 GiB (+0.5 GiB when tp > 1)", m.overhead)
	t.add("engine reserve", "vLLM gpu_memory_utilization 0.9: 10% of capacity", m.margin)
	return m
}
