package advisor

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
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
	Offload    bool `json:"offload,omitempty"`
	MicroBatch int  `json:"microBatch,omitempty"`
	// Serving: model replicas and sequences in flight per replica.
	Replicas int `json:"replicas,omitempty"`
	Batch    int `json:"batch,omitempty"`
}

// GPUs is the plan's GPU count.
func (p Plan) GPUs() int { return p.Nodes * p.GPUsPerNode }

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
	fmt.Fprintf(&b, "tp%d pp%d dp%d zero%d", p.TP, p.PP, p.DP, p.ZeRO)
	if p.Recompute != RecomputeNone && p.Recompute != "" {
		b.WriteString(" " + string(p.Recompute) + "-recompute")
	}
	if p.Offload {
		b.WriteString(" offload")
	}
	fmt.Fprintf(&b, " mb%d", p.MicroBatch)
	return b.String()
}

// Memory is what one GPU holds, the largest pipeline stage's share.
type Memory struct {
	Weights          model.Bytes `json:"weights"`
	Gradients        model.Bytes `json:"gradients"`
	Optimizer        model.Bytes `json:"optimizer"`
	Activations      model.Bytes `json:"activations"`
	KVCache          model.Bytes `json:"kvCache"`
	Adapters         model.Bytes `json:"adapters"`
	AdapterOptimizer model.Bytes `json:"adapterOptimizer"`
	QuantConstants   model.Bytes `json:"quantConstants"`
	// Overhead is the CUDA context, library workspaces and NCCL buffers.
	Overhead model.Bytes `json:"overhead"`
	// Margin is what the caching allocator loses to fragmentation (training)
	// or what the serving engine leaves unused (vLLM's
	// gpu_memory_utilization).
	Margin   model.Bytes `json:"margin"`
	Total    model.Bytes `json:"total"`
	Capacity model.Bytes `json:"capacity"`
	// Offloaded is what the plan keeps in host memory per node.
	Offloaded model.Bytes `json:"offloaded,omitempty"`
}

// mem is Memory in float bytes, for the hot path.
type mem struct {
	weights, grads, optim, acts, kv, adapters, adapterOpt, quant, overhead, margin float64
	offloadedPerGPU                                                                float64
	// gather is the part of weights and grads that ZeRO-3 gathers per layer,
	// kept apart for tests against the ZeRO paper's model-state figures.
	gather float64
}

func (m mem) total() float64 {
	return m.weights + m.grads + m.optim + m.acts + m.kv + m.adapters + m.adapterOpt + m.quant + m.overhead + m.margin
}

func (m mem) export(capacity float64, gpusPerNode int) Memory {
	b := func(f float64) model.Bytes { return model.Bytes(math.Round(f)) }
	return Memory{
		Weights: b(m.weights), Gradients: b(m.grads), Optimizer: b(m.optim), Activations: b(m.acts),
		KVCache: b(m.kv), Adapters: b(m.adapters), AdapterOptimizer: b(m.adapterOpt), QuantConstants: b(m.quant),
		Overhead: b(m.overhead), Margin: b(m.margin), Total: b(m.total()), Capacity: b(capacity),
		Offloaded: b(m.offloadedPerGPU * float64(gpusPerNode)),
	}
}

// Memory constants.
const (
	gib = float64(1 << 30)
	// cudaContext is the CUDA context, cuBLAS/cuDNN workspaces and the
	// PyTorch caching allocator's first blocks: 0.3–0.5 GiB for a bare
	// context with CUDA lazy loading (CUDA 11.7+; PyTorch "CUDA semantics"
	// notes) plus workspaces; we take 1 GiB.
	cudaContext = 1 * gib
	// ncclBuffers are NCCL's communication buffers, 4 MiB per channel per
	// peer by default (NCCL_BUFFSIZE, NCCL docs); 0.5 GiB covers 8-way
	// rings and trees with up to 16 channels.
	ncclBuffers = 0.5 * gib
	// trainMargin is the caching allocator's fragmentation allowance: the
	// PyTorch allocator reports 5–10% reserved-but-unallocated memory for
	// LLM training (PyTorch memory-snapshot docs; we take 7%).
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
// the 5·a·s² scores.
func (w *workload) activationPerLayer(seq int, t int, rc Recompute) float64 {
	s, h := float64(seq), float64(w.arch.Hidden)
	t64 := float64(t)
	if rc == RecomputeFull {
		return 2 * s * h / t64
	}
	f := float64(w.arch.FFN)
	k := 1.0
	if w.arch.ActiveExperts > 0 {
		k = float64(w.arch.ActiveExperts)
	}
	mlp := 3 + 4*f/h*k
	if w.gated {
		mlp = 3 + 8*f/h*k
	}
	per := s * h * (11 + 4 + mlp)
	if w.Attention == Eager && rc == RecomputeNone {
		per += 5 * float64(w.arch.Heads) * s * s
	}
	return per / t64
}

// trainingMemory is one GPU's memory for a training plan: the first
// pipeline stage, which holds the most in-flight micro-batches. capacity is
// the GPU's memory in bytes.
func (w *workload) trainingMemory(p Plan, capacity float64) mem {
	var m mem
	tp, pp, dp := float64(p.TP), float64(p.PP), float64(p.DP)
	shard := w.params / (tp * pp) // parameters on one model-parallel rank
	layerParams := (w.layerDense + w.expertMLP*math.Max(1, float64(w.arch.Experts))) / tp

	switch w.Task {
	case PreTrain, FullFineTune:
		wb, gb, ob := trainingBytes(w.Precision, w.Optimizer)
		m.weights, m.grads, m.optim = wb*shard, gb*shard, ob*shard
		// ZeRO partitions optimizer states (stage ≥ 1), gradients (≥ 2) and
		// weights (3) across the data-parallel group (Rajbhandari et al.
		// 2020, §5, Figure 1).
		if p.ZeRO >= 1 {
			m.optim /= dp
		}
		if p.ZeRO >= 2 {
			m.grads /= dp
		}
		if p.ZeRO >= 3 {
			m.weights /= dp
			// Gathered parameters of the running and the prefetched layer
			// (FSDP forward/backward prefetch; DeepSpeed stage3 prefetch
			// bucket), and their gradients before reduce-scatter.
			m.gather = 2*layerParams*2 + layerParams*gb
			m.weights += 2 * layerParams * 2
			m.grads += layerParams * gb
		}
		if p.Offload {
			m.offloadedPerGPU = m.optim
			m.optim = 0
		}
	case LoRA, QLoRA:
		base := w.Precision.bytes()
		if w.Task == QLoRA {
			// Linear layers in 4 bits; embeddings, output layer and norms
			// stay bf16 (bitsandbytes Linear4bit replaces nn.Linear only).
			lin := (w.params - w.embed) / (tp * pp)
			m.weights = 0.5*lin + 2*w.embed/(tp*pp)
			// Quantisation constants: one fp32 absmax per 64 weights is 0.5
			// bit per parameter; double quantisation brings it to 0.127 bit
			// (Dettmers et al. 2023 "QLoRA", §3). nf4 uses double
			// quantisation (the paper's recipe), int4 not.
			bits := 0.5
			if w.Precision == NF4 {
				bits = 0.127
			}
			m.quant = bits / 8 * lin
		} else {
			m.weights = base * shard
		}
		if p.ZeRO >= 3 {
			m.weights /= dp
			m.quant /= dp
			m.gather = 2 * layerParams * base
			m.weights += m.gather
		}
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
			m.offloadedPerGPU = m.adapterOpt
			m.adapterOpt = 0
		}
	}

	// Activations. With 1F1B the first stage holds min(pp, m) micro-batches
	// of its L/pp layers (Korthikanti et al. 2022, §4.2.3): L layers' worth
	// when the pipeline is full.
	micro := math.Ceil(float64(w.GlobalBatch) / (dp * float64(p.MicroBatch)))
	inflight := math.Min(pp, micro)
	layers := math.Ceil(float64(w.arch.Layers) / pp)
	perSeq := w.activationPerLayer(w.SequenceLength, p.TP, p.Recompute)
	m.acts = layers * inflight * float64(p.MicroBatch) * perSeq
	if p.Recompute == RecomputeFull {
		// The layer being recomputed holds its full activations.
		m.acts += float64(p.MicroBatch) * w.activationPerLayer(w.SequenceLength, p.TP, RecomputeSelective)
	}
	// Output logits in fp32 for the loss (Megatron and Hugging Face upcast
	// before cross-entropy), vocabulary-parallel over TP; held by the last
	// stage, counted here as the conservative bound for pp = 1.
	if pp == 1 {
		m.acts += 4 * float64(w.SequenceLength) * float64(p.MicroBatch) * float64(w.arch.Vocab) / tp
	}

	m.overhead = cudaContext
	if p.GPUs() > 1 {
		m.overhead += ncclBuffers
	}
	m.margin = trainMargin * capacity
	return m
}

// servingWeights is one GPU's weights and quantisation constants at tensor
// parallel degree tp.
func (w *workload) servingWeights(tp int) (weights, quant float64) {
	t := float64(tp)
	switch w.Precision {
	case INT4, NF4:
		// Weight-only 4-bit (GPTQ, AWQ): linear layers in 4 bits with an
		// fp16 scale and zero point per group of 128 (Frantar et al. 2023;
		// Lin et al. 2024): 4 bytes per 128 weights. Embeddings and the
		// output layer stay 16-bit.
		lin := w.params - w.embed
		return (0.5*lin + 2*w.embed) / t, lin / 32 / t
	case INT8:
		// LLM.int8()/SmoothQuant: per-channel scales, < 0.1%.
		lin := w.params - w.embed
		return (lin + 2*w.embed) / t, 0
	}
	return w.Precision.bytes() * w.params / t, 0
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
	var m mem
	m.weights, m.quant = w.servingWeights(tp)
	m.kv = float64(batch) * w.kvPerSequence(tp)
	// Peak activations of one prefill chunk: hidden states and the MLP
	// intermediate, 2 bytes each, plus the chunk's logits in fp32 (vLLM
	// profiles this peak with a dummy forward pass).
	chunk := math.Min(prefillChunk, float64(batch)*float64(w.Serving.InputTokens))
	k := 1.0
	if w.arch.ActiveExperts > 0 {
		k = float64(w.arch.ActiveExperts)
	}
	m.acts = chunk * (4*float64(w.arch.Hidden) + 4*float64(w.arch.FFN)*k) / float64(tp)
	m.acts += 4 * float64(min(batch, prefillChunk)) * float64(w.arch.Vocab) / float64(tp)
	m.overhead = cudaContext
	if tp > 1 {
		m.overhead += ncclBuffers
	}
	m.margin = serveMargin * capacity
	return m
}
