package advisor

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Task is what the workload does with the model.
type Task string

// Tasks.
const (
	PreTrain     Task = "pretrain"
	FullFineTune Task = "full-finetune"
	LoRA         Task = "lora"
	QLoRA        Task = "qlora"
	Serving      Task = "serving"
)

// Tasks lists every task, for help text and validation.
var tasks = []Task{PreTrain, FullFineTune, LoRA, QLoRA, Serving}

// Training reports whether the task updates weights.
func (t Task) Training() bool { return t != Serving }

// Precision is the number format of the weights (and, for training, of the
// compute: bf16/fp16 mean mixed precision with fp32 master weights).
type Precision string

// Precisions.
const (
	FP32 Precision = "fp32"
	BF16 Precision = "bf16"
	FP16 Precision = "fp16"
	FP8  Precision = "fp8"
	INT8 Precision = "int8"
	INT4 Precision = "int4"
	NF4  Precision = "nf4"
)

var precisions = []Precision{FP32, BF16, FP16, FP8, INT8, INT4, NF4}

// bytes is the storage size of one weight in this format. int4/nf4 values
// are packed two to a byte; their quantisation constants are counted apart
// (see quantConstBytes).
func (p Precision) bytes() float64 {
	switch p {
	case FP32:
		return 4
	case BF16, FP16:
		return 2
	case FP8, INT8:
		return 1
	case INT4, NF4:
		return 0.5
	}
	return 2
}

// Optimizer is the training optimizer.
type Optimizer string

// Optimizers.
const (
	AdamW     Optimizer = "adamw"
	Adam8bit  Optimizer = "adam8bit"
	SGD       Optimizer = "sgd"
	Adafactor Optimizer = "adafactor"
)

var optimizers = []Optimizer{AdamW, Adam8bit, SGD, Adafactor}

// Attention is how attention is computed, which decides whether the s²
// attention-score activations are stored.
type Attention string

// Attention kernels.
const (
	// Flash is FlashAttention (Dao et al. 2022): scores are recomputed in the
	// backward pass, never stored. The default: PyTorch SDPA, vLLM and
	// Megatron use it on Ampere and later.
	Flash Attention = "flash"
	// Eager stores scores, softmax and dropout mask: 5·a·s²·b bytes per layer
	// (Korthikanti et al. 2022, eq. 1).
	Eager Attention = "eager"
)

// Model is a transformer's architecture. With a Preset, fields left zero
// take the preset's values; fields set override them.
type Model struct {
	// Parameters overrides the count derived from the architecture (total,
	// including all experts). Zero means derive it.
	Parameters float64 `json:"parameters,omitempty"`
	Layers     int     `json:"layers,omitempty"`
	Hidden     int     `json:"hidden,omitempty"`
	// FFN is the MLP's intermediate size; zero means 4·Hidden.
	FFN   int `json:"ffn,omitempty"`
	Heads int `json:"heads,omitempty"`
	// KVHeads is the number of key/value heads (grouped-query attention);
	// zero means Heads (multi-head attention).
	KVHeads int `json:"kvHeads,omitempty"`
	// HeadDim is each head's width (Hugging Face head_dim); zero means
	// Hidden/Heads. Qwen3, GPT-OSS and Gemma set it apart, so that
	// heads·headDim differs from the hidden size.
	HeadDim int `json:"headDim,omitempty"`
	Vocab   int `json:"vocab,omitempty"`
	// Experts and ActiveExperts describe a mixture-of-experts MLP: routed
	// experts per layer and routed experts per token (top-k); zero means
	// dense.
	Experts       int `json:"experts,omitempty"`
	ActiveExperts int `json:"activeExperts,omitempty"`
	// SharedExperts are experts every token passes through besides its
	// routed ones (DeepSeekMoE, Dai et al. 2024; DeepSeek-V3: 1), each of
	// ExpertFFN width; replicated, not split by expert parallelism.
	SharedExperts int `json:"sharedExperts,omitempty"`
	// ExpertFFN is one expert's intermediate size (Hugging Face
	// moe_intermediate_size; Megatron --moe-ffn-hidden-size); zero means
	// FFN. Fine-grained MoE splits experts narrower than the dense MLP
	// (DeepSeek-V3: 2048 against a dense 18432).
	ExpertFFN int `json:"expertFFN,omitempty"`
	// DenseLayers is how many of the first layers keep a dense MLP of
	// width FFN (DeepSeek-V3 first_k_dense_replace: 3); the rest are MoE.
	DenseLayers int `json:"denseLayers,omitempty"`
	// RouteNodes is node-limited routing: each token's routed experts lie
	// on at most this many nodes, and a token crosses the network once per
	// target node, then fans out over NVLink (DeepSeek-V3 report §3.2.2,
	// M = 4; DeepEP; Megatron-Core node-limited routing). Zero means
	// unlimited: every routed copy travels on its own.
	RouteNodes int `json:"routeNodes,omitempty"`
	// GatedMLP is true for SwiGLU/GeGLU MLPs (three matrices), false for
	// the two-matrix GELU MLP of GPT-2/3.
	GatedMLP *bool `json:"gatedMLP,omitempty"`
	// TiedEmbeddings shares the input embedding with the output layer.
	TiedEmbeddings *bool `json:"tiedEmbeddings,omitempty"`
	// Dropout is the dropout probability training applies (hidden and
	// attention). At 0 no dropout mask is stored: PyTorch's dropout returns
	// its input unchanged when p = 0, so Korthikanti et al.'s two hidden
	// masks (s·b·h bytes each) and, with eager attention, the a·s²·b
	// attention mask and the 2·a·s²·b dropped-out scores are not kept.
	// Unset means the preset's published value, or, for a custom model,
	// that masks are stored (Korthikanti et al.'s count).
	Dropout *float64 `json:"dropout,omitempty"`
}

// LoRASpec sets the adapters of a LoRA or QLoRA fine-tune.
type LoRASpec struct {
	// Rank is r; zero means 16.
	Rank int `json:"rank,omitempty"`
	// Targets is "all-linear" (the default; QLoRA's recipe) or "attention"
	// (q, k, v, o only; the original LoRA recipe).
	Targets string `json:"targets,omitempty"`
}

// ServingSpec describes an inference workload.
type ServingSpec struct {
	// ContextLength is the longest sequence (prompt + output) a request may
	// reach; zero means InputTokens + OutputTokens.
	ContextLength int `json:"contextLength,omitempty"`
	// Concurrency is the number of sequences in flight at once; zero means 1.
	Concurrency int `json:"concurrency,omitempty"`
	// InputTokens and OutputTokens are the mean prompt and completion length.
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	// TargetTokensPerSecond is the output throughput to sustain (all
	// replicas together); zero means whatever Concurrency gives.
	TargetTokensPerSecond float64 `json:"targetTokensPerSecond,omitempty"`
	// TargetLatency bounds one request's end-to-end time; zero means none.
	TargetLatency model.Duration `json:"targetLatency,omitempty"`
	// TotalTokens is the output tokens to produce, for a cost to finish (a
	// batch job); zero means cost per hour and per million tokens only.
	TotalTokens float64 `json:"totalTokens,omitempty"`
	// KVCachePrecision is the KV cache format; empty means bf16.
	KVCachePrecision Precision `json:"kvCachePrecision,omitempty"`
}

// Profile is a workload: the model, what is done with it, and how much.
type Profile struct {
	// Preset names a widely used open model (see Presets); Model fields set
	// alongside override the preset's.
	Preset    string    `json:"preset,omitempty"`
	Model     Model     `json:"model,omitempty"`
	Task      Task      `json:"task"`
	Precision Precision `json:"precision,omitempty"` // default bf16 (nf4 for qlora)
	Optimizer Optimizer `json:"optimizer,omitempty"` // default adamw
	Attention Attention `json:"attention,omitempty"` // default flash
	// Framework is the training stack whose activation storage applies:
	// pytorch (default: eager modules, e.g. Hugging Face's LlamaMLP keeps
	// gate, SiLU, up and product, 8·f/h) or megatron (Megatron-Core's
	// fused bias-SwiGLU keeps only the fc1 output and the fc2 input,
	// 6·f/h).
	Framework string `json:"framework,omitempty"`
	// SequenceLength is tokens per training sequence; zero means 2048
	// (4096 for presets trained at 4096 or more).
	SequenceLength int `json:"sequenceLength,omitempty"`
	// MicroBatch fixes sequences per GPU per forward pass; zero lets the
	// plan search choose.
	MicroBatch int `json:"microBatch,omitempty"`
	// GlobalBatch is sequences per optimizer step; zero means 512 for
	// pre-training, 64 for fine-tuning.
	GlobalBatch int `json:"globalBatch,omitempty"`
	// Tokens to train on, or Steps optimizer steps; one of them is needed
	// for training.
	Tokens float64 `json:"tokens,omitempty"`
	Steps  int     `json:"steps,omitempty"`

	// Parallelism is "auto" (the default: tensor, pipeline and data
	// parallelism with ZeRO, as Megatron-LM or NeMo run it) or "data"
	// (ZeRO/FSDP data parallelism only, as Hugging Face Trainer,
	// Accelerate and DeepSpeed without Megatron run it).
	Parallelism string `json:"parallelism,omitempty"`

	LoRA    LoRASpec    `json:"lora,omitempty"`
	Serving ServingSpec `json:"serving,omitempty"`

	// Pin fixes parts of the training plan; what it leaves zero the search
	// chooses.
	Pin Pin `json:"pin,omitempty"`
}

// Pin fixes a training plan's choices, so a known configuration can be
// asked for directly. Zero values (nil pointers) leave a choice free.
type Pin struct {
	// GPUs and Nodes fix the plan's size: GPUs must be whole nodes of an
	// offer (offers of other sizes are left out).
	GPUs  int `json:"gpus,omitempty"`
	Nodes int `json:"nodes,omitempty"`
	// TP, PP, DP and CP fix the tensor, pipeline, data and context
	// parallel degrees.
	TP int `json:"tp,omitempty"`
	PP int `json:"pp,omitempty"`
	DP int `json:"dp,omitempty"`
	CP int `json:"cp,omitempty"`
	// EP fixes the expert-parallel degree of an MoE: routed experts are
	// split over EP ranks carved out of the data-parallel group
	// (Megatron-Core --expert-model-parallel-size; Lepikhin et al. 2020
	// "GShard"); it must divide the experts and dp, or tp·dp with MoE
	// Parallel Folding (then the experts are not split by TP).
	EP int `json:"ep,omitempty"`
	// VP is the number of virtual pipeline stages (model chunks) per
	// pipeline rank: Megatron's interleaved 1F1B schedule
	// (--num-layers-per-virtual-pipeline-stage; Narayanan et al. 2021
	// §2.2.2); it needs pp > 1.
	VP int `json:"vp,omitempty"`
	// OverlapExpertComm says the framework hides the all-to-all of expert
	// parallelism behind compute (DeepSeek-V3's DualPipe; Megatron-Core
	// --overlap-moe-expert-parallel-comm); without it the all-to-all is
	// exposed.
	OverlapExpertComm bool `json:"overlapExpertComm,omitempty"`
	// ZeRO fixes the ZeRO stage (0–3); Sharding names it the FSDP way:
	// no-shard (0), shard-grad-op (2) or full-shard (3).
	ZeRO     *int   `json:"zero,omitempty"`
	Sharding string `json:"sharding,omitempty"`
	// Recompute is none, selective or full.
	Recompute Recompute `json:"recompute,omitempty"`
	// OffloadOptimizer and OffloadParams fix CPU offload of the optimizer
	// (ZeRO-Offload) and of the weights (ZeRO-3 offload_param, FSDP
	// CPUOffload).
	OffloadOptimizer *bool `json:"offloadOptimizer,omitempty"`
	OffloadParams    *bool `json:"offloadParams,omitempty"`
}

// shardingStages maps FSDP sharding strategies to ZeRO stages (PyTorch
// FSDP docs: FULL_SHARD ≈ ZeRO-3, SHARD_GRAD_OP ≈ ZeRO-2, NO_SHARD = DDP).
var shardingStages = map[string]int{"no-shard": 0, "shard-grad-op": 2, "full-shard": 3}

// validatePin checks the pin against the resolved architecture and
// applies Sharding to ZeRO.
func validatePin(p *Pin, arch Model, layers int, parallelism string, training bool, fe *model.FieldErrors) {
	if *p == (Pin{}) {
		return
	}
	if !training {
		fe.Add("pin", "pins apply to training plans; serving picks tensor parallelism and batch itself")
		return
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"gpus", p.GPUs}, {"nodes", p.Nodes}, {"tp", p.TP}, {"pp", p.PP}, {"dp", p.DP}, {"cp", p.CP}, {"ep", p.EP}, {"vp", p.VP}} {
		if f.v < 0 || f.v > 1<<14 {
			fe.Add("pin."+f.name, "must be between 0 (free) and 16384")
		}
	}
	if p.VP > 1 && p.PP < 2 {
		fe.Add("pin.vp", "virtual pipeline stages need a pinned pipeline degree pp of at least 2")
	}
	if p.VP > 1 && p.PP > 1 && layers > 0 && p.PP*p.VP > layers {
		fe.Add("pin.vp", fmt.Sprintf("pp·vp is %d, more model chunks than %d layers", p.PP*p.VP, layers))
	}
	if p.OverlapExpertComm && arch.Experts == 0 {
		fe.Add("pin.overlapExpertComm", "needs an MoE model (model.experts)")
	}
	if p.EP > 1 {
		switch {
		case arch.Experts == 0:
			fe.Add("pin.ep", "expert parallelism needs an MoE model (model.experts)")
		case arch.Experts%p.EP != 0:
			fe.Add("pin.ep", fmt.Sprintf("expert parallel degree %d does not divide %d experts", p.EP, arch.Experts))
		case p.DP > 0 && p.DP%p.EP != 0 && (max(1, p.TP)*p.DP)%p.EP != 0:
			fe.Add("pin.ep", fmt.Sprintf("expert parallel degree %d divides neither dp %d nor tp·dp %d (EP ranks come from the data-parallel group, or with folding from tp×dp)", p.EP, p.DP, max(1, p.TP)*p.DP))
		}
	}
	if p.TP > 0 && arch.Heads > 0 && arch.Heads%p.TP != 0 {
		fe.Add("pin.tp", fmt.Sprintf("tensor parallel degree %d does not divide %d heads", p.TP, arch.Heads))
	}
	if p.PP > 0 && layers > 0 && p.PP > layers {
		fe.Add("pin.pp", fmt.Sprintf("pipeline degree %d exceeds %d layers", p.PP, layers))
	}
	if parallelism == "data" && (p.TP > 1 || p.PP > 1) {
		fe.Add("pin", "parallelism data allows no tensor or pipeline parallelism; use parallelism auto")
	}
	if p.TP > 0 && p.PP > 0 && p.DP > 0 {
		if g := p.TP * p.PP * p.DP * max(1, p.CP); p.GPUs > 0 && g != p.GPUs {
			fe.Add("pin.gpus", fmt.Sprintf("tp·pp·dp·cp is %d, not %d", g, p.GPUs))
		}
	}
	if p.Sharding != "" {
		z, ok := shardingStages[p.Sharding]
		switch {
		case !ok:
			fe.Add("pin.sharding", "must be no-shard, shard-grad-op or full-shard")
		case p.ZeRO != nil && *p.ZeRO != z:
			fe.Add("pin.sharding", fmt.Sprintf("%s is ZeRO stage %d, but zero is %d", p.Sharding, z, *p.ZeRO))
		default:
			p.ZeRO = &z
		}
	}
	if p.ZeRO != nil {
		switch z := *p.ZeRO; {
		case z < 0 || z > 3:
			fe.Add("pin.zero", "must be 0, 1, 2 or 3")
		case z >= 2 && p.PP > 1:
			fe.Add("pin.zero", "ZeRO stages 2 and 3 do not combine with pipeline parallelism (DeepSpeed)")
		}
	}
	switch p.Recompute {
	case "", RecomputeNone, RecomputeSelective, RecomputeFull:
	default:
		fe.Add("pin.recompute", "must be none, selective or full")
	}
	if p.OffloadParams != nil && *p.OffloadParams && p.ZeRO != nil && *p.ZeRO != 3 {
		fe.Add("pin.offloadParams", "parameter offload needs ZeRO stage 3 (full-shard)")
	}
}

// workload is a validated Profile with every default applied and the
// derived quantities the models need.
type workload struct {
	Profile
	arch       Model // resolved architecture
	gated      bool
	dropout    bool // dropout masks are stored (Model.Dropout unset or > 0)
	headDim    int
	params     float64 // total parameters
	active     float64 // parameters touched per token (MoE: active experts)
	embed      float64 // embedding + output-layer parameters
	layerDense float64 // per-layer parameters outside the MLP
	expertMLP  float64 // parameters of one expert's MLP
	// routed is every routed expert's parameters, all layers: what expert
	// parallelism splits (the rest is replicated over the EP group).
	routed float64
	// epDegrees is 0 (none) and every power of two dividing the experts:
	// the expert-parallel degrees the plan search tries.
	epDegrees []int
	adapters  float64 // LoRA parameters
	tokens    float64 // training tokens to process
	steps     float64
	kvBytes   float64 // KV cache bytes per token, all layers
	// exhaustive turns the plan search's pruning off (Options.exhaustive).
	exhaustive bool
}

// Validate checks a profile and returns every problem with its field path.
func (p Profile) Validate() model.FieldErrors {
	_, fe := resolve(p)
	return fe
}

// resolve applies the preset and defaults and derives the model's sizes.
func resolve(p Profile) (workload, model.FieldErrors) {
	var fe model.FieldErrors
	arch := p.Model
	presetBad := false
	if p.Preset != "" {
		pre, ok := LookupPreset(p.Preset)
		if !ok {
			presetBad = true
			fe.Add("preset", fmt.Sprintf("unknown preset %q; known: %s", p.Preset, strings.Join(PresetNames(), ", ")))
		} else {
			arch = overlay(pre.Model, p.Model)
			if p.SequenceLength == 0 && pre.Context >= 4096 {
				p.SequenceLength = 4096
			}
		}
	}
	if !slices.Contains(tasks, p.Task) {
		fe.Add("task", fmt.Sprintf("must be one of %s", joinEnum(tasks)))
	}
	if p.Precision == "" {
		p.Precision = BF16
		if p.Task == QLoRA {
			p.Precision = NF4
		}
	}
	if !slices.Contains(precisions, p.Precision) {
		fe.Add("precision", fmt.Sprintf("unknown precision %q; want one of %s", p.Precision, joinEnum(precisions)))
	} else {
		switch {
		case p.Task == QLoRA && p.Precision != NF4 && p.Precision != INT4:
			fe.Add("precision", "qlora quantises the base model to 4 bits: use nf4 (or int4)")
		case (p.Task == PreTrain || p.Task == FullFineTune) && (p.Precision == INT8 || p.Precision == INT4 || p.Precision == NF4):
			fe.Add("precision", fmt.Sprintf("%s weights cannot be trained directly; use bf16, fp16, fp8 or fp32, or task qlora", p.Precision))
		case p.Task == LoRA && (p.Precision == INT4 || p.Precision == NF4):
			fe.Add("precision", "a 4-bit base model is task qlora")
		}
	}
	if p.Optimizer == "" {
		p.Optimizer = AdamW
	}
	if !slices.Contains(optimizers, p.Optimizer) {
		fe.Add("optimizer", fmt.Sprintf("unknown optimizer %q; want one of %s", p.Optimizer, joinEnum(optimizers)))
	}
	if p.Attention == "" {
		p.Attention = Flash
	}
	if p.Attention != Flash && p.Attention != Eager {
		fe.Add("attention", "must be flash or eager")
	}
	if p.Framework != "" && p.Framework != "pytorch" && p.Framework != "megatron" {
		fe.Add("framework", fmt.Sprintf("unknown framework %q; want pytorch or megatron", p.Framework))
	}

	if p.Parallelism == "" {
		p.Parallelism = "auto"
	}
	if p.Parallelism != "auto" && p.Parallelism != "data" {
		fe.Add("parallelism", "must be auto or data")
	}

	// Architecture.
	mp := "model."
	positive := func(name string, v int) {
		if v <= 0 && !presetBad { // an unknown preset is the one problem
			fe.Add(mp+name, "must be > 0 (or give a preset)")
		}
	}
	positive("layers", arch.Layers)
	positive("hidden", arch.Hidden)
	positive("heads", arch.Heads)
	positive("vocab", arch.Vocab)
	if arch.FFN < 0 {
		fe.Add(mp+"ffn", "must be >= 0")
	}
	if arch.FFN == 0 {
		arch.FFN = 4 * arch.Hidden
	}
	if arch.KVHeads < 0 {
		fe.Add(mp+"kvHeads", "must be >= 0")
	}
	if arch.KVHeads == 0 {
		arch.KVHeads = arch.Heads
	}
	if arch.HeadDim < 0 {
		fe.Add(mp+"headDim", "must be >= 0")
	}
	if arch.HeadDim == 0 && arch.Heads > 0 && arch.Hidden > 0 && arch.Hidden%arch.Heads != 0 {
		fe.Add(mp+"heads", fmt.Sprintf("%d heads do not divide hidden size %d (set headDim when heads·headDim differs from hidden)", arch.Heads, arch.Hidden))
	}
	if arch.Heads > 0 && arch.KVHeads > 0 && arch.Heads%arch.KVHeads != 0 {
		fe.Add(mp+"kvHeads", fmt.Sprintf("%d key/value heads do not divide %d heads", arch.KVHeads, arch.Heads))
	}
	if arch.Experts < 0 || arch.ActiveExperts < 0 {
		fe.Add(mp+"experts", "must be >= 0")
	}
	if arch.Experts > 0 && (arch.ActiveExperts == 0 || arch.ActiveExperts > arch.Experts) {
		fe.Add(mp+"activeExperts", fmt.Sprintf("must be between 1 and experts (%d)", arch.Experts))
	}
	if arch.Experts == 0 && arch.ActiveExperts > 0 {
		fe.Add(mp+"experts", "activeExperts needs experts")
	}
	if arch.Dropout != nil && !(*arch.Dropout >= 0 && *arch.Dropout < 1) {
		fe.Add(mp+"dropout", fmt.Sprintf("must be in [0, 1), got %g", *arch.Dropout))
	}
	if arch.SharedExperts < 0 || arch.ExpertFFN < 0 || arch.DenseLayers < 0 || arch.RouteNodes < 0 {
		fe.Add(mp+"experts", "sharedExperts, expertFFN, denseLayers and routeNodes must be >= 0")
	}
	if arch.Experts == 0 && (arch.SharedExperts > 0 || arch.ExpertFFN > 0 || arch.DenseLayers > 0 || arch.RouteNodes > 0) {
		fe.Add(mp+"experts", "sharedExperts, expertFFN, denseLayers and routeNodes describe an MoE: set experts and activeExperts")
	}
	if arch.Experts > 0 && arch.Layers > 0 && arch.DenseLayers >= arch.Layers {
		fe.Add(mp+"denseLayers", fmt.Sprintf("must be less than layers (%d): an MoE needs at least one MoE layer", arch.Layers))
	}
	if arch.ExpertFFN == 0 {
		arch.ExpertFFN = arch.FFN
	}
	if arch.Parameters < 0 || math.IsNaN(arch.Parameters) || math.IsInf(arch.Parameters, 0) {
		fe.Add(mp+"parameters", "must be a finite number >= 0")
	}
	// Bound sizes so that products stay far from overflow and fuzzing finds
	// real bugs, not float infinities.
	for _, b := range []struct {
		name string
		v    int
		max  int
	}{{"layers", arch.Layers, 1 << 12}, {"hidden", arch.Hidden, 1 << 18}, {"heads", arch.Heads, 1 << 12}, {"vocab", arch.Vocab, 1 << 24}, {"ffn", arch.FFN, 1 << 20}, {"headDim", arch.HeadDim, 1 << 12}, {"experts", arch.Experts, 1 << 12}, {"sharedExperts", arch.SharedExperts, 1 << 6}, {"expertFFN", arch.ExpertFFN, 1 << 20}, {"routeNodes", arch.RouteNodes, 1 << 12}} {
		if b.v > b.max {
			fe.Add(mp+b.name, fmt.Sprintf("must be <= %d", b.max))
		}
	}

	// Amounts.
	if p.Task.Training() {
		if p.SequenceLength == 0 {
			p.SequenceLength = 2048
		}
		if p.GlobalBatch == 0 {
			p.GlobalBatch = 64
			if p.Task == PreTrain {
				p.GlobalBatch = 512
			}
		}
		if p.SequenceLength < 0 || p.SequenceLength > 1<<21 {
			fe.Add("sequenceLength", "must be between 1 and 2097152")
		}
		if p.GlobalBatch < 0 || p.GlobalBatch > 1<<20 {
			fe.Add("globalBatch", "must be between 1 and 1048576")
		}
		if p.MicroBatch < 0 || p.MicroBatch > 1<<12 {
			fe.Add("microBatch", "must be between 1 and 4096 (0 lets the search choose)")
		}
		if p.MicroBatch > p.GlobalBatch && p.GlobalBatch > 0 {
			fe.Add("microBatch", fmt.Sprintf("must not exceed globalBatch (%d)", p.GlobalBatch))
		}
		switch {
		case p.Tokens < 0 || math.IsNaN(p.Tokens) || math.IsInf(p.Tokens, 0) || p.Tokens > 1e16:
			fe.Add("tokens", "must be a finite number between 0 and 1e16")
		case p.Steps < 0:
			fe.Add("steps", "must be >= 0")
		case p.Tokens == 0 && p.Steps == 0:
			fe.Add("tokens", "give tokens or steps: how much data to process")
		case p.Tokens > 0 && p.Steps > 0:
			fe.Add("steps", "give tokens or steps, not both")
		}
		if p.Task == LoRA || p.Task == QLoRA {
			if p.LoRA.Rank == 0 {
				p.LoRA.Rank = 16
			}
			if p.LoRA.Targets == "" {
				p.LoRA.Targets = "all-linear"
			}
			if p.LoRA.Rank < 0 || p.LoRA.Rank > 1<<14 {
				fe.Add("lora.rank", "must be between 1 and 16384")
			}
			if p.LoRA.Targets != "all-linear" && p.LoRA.Targets != "attention" {
				fe.Add("lora.targets", "must be all-linear or attention")
			}
		}
	} else {
		s := &p.Serving
		if s.InputTokens <= 0 {
			fe.Add("serving.inputTokens", "must be > 0")
		}
		if s.OutputTokens <= 0 {
			fe.Add("serving.outputTokens", "must be > 0")
		}
		if s.ContextLength == 0 {
			s.ContextLength = s.InputTokens + s.OutputTokens
		}
		if s.Concurrency == 0 {
			s.Concurrency = 1
		}
		if s.ContextLength < 0 || s.ContextLength > 1<<21 {
			fe.Add("serving.contextLength", "must be between 1 and 2097152")
		} else if s.InputTokens > 0 && s.OutputTokens > 0 && s.ContextLength < s.InputTokens+s.OutputTokens {
			fe.Add("serving.contextLength", fmt.Sprintf("must be at least inputTokens + outputTokens (%d)", s.InputTokens+s.OutputTokens))
		}
		if s.InputTokens > 1<<21 || s.OutputTokens > 1<<21 {
			fe.Add("serving.inputTokens", "input and output must each be <= 2097152 tokens")
		}
		if s.Concurrency < 0 || s.Concurrency > 1<<20 {
			fe.Add("serving.concurrency", "must be between 1 and 1048576")
		}
		if s.TargetTokensPerSecond < 0 || math.IsNaN(s.TargetTokensPerSecond) || math.IsInf(s.TargetTokensPerSecond, 0) {
			fe.Add("serving.targetTokensPerSecond", "must be a finite number >= 0")
		}
		if s.TargetLatency < 0 {
			fe.Add("serving.targetLatency", "must be >= 0")
		}
		if s.TotalTokens < 0 || math.IsNaN(s.TotalTokens) || math.IsInf(s.TotalTokens, 0) {
			fe.Add("serving.totalTokens", "must be a finite number >= 0")
		}
		if s.KVCachePrecision == "" {
			s.KVCachePrecision = BF16
		}
		if s.KVCachePrecision != BF16 && s.KVCachePrecision != FP16 && s.KVCachePrecision != FP8 && s.KVCachePrecision != INT8 && s.KVCachePrecision != FP32 {
			fe.Add("serving.kvCachePrecision", "must be fp32, bf16, fp16, fp8 or int8")
		}
	}
	validatePin(&p.Pin, arch, arch.Layers, p.Parallelism, p.Task.Training(), &fe)
	if len(fe) > 0 {
		return workload{}, fe
	}

	w := workload{Profile: p, arch: arch, headDim: arch.Hidden / arch.Heads}
	if arch.HeadDim > 0 {
		w.headDim = arch.HeadDim
	}
	w.gated = arch.GatedMLP == nil || *arch.GatedMLP
	w.dropout = arch.Dropout == nil || *arch.Dropout > 0
	w.deriveParams()
	w.epDegrees = noExpertParallelism
	if arch.Experts > 0 {
		w.epDegrees = []int{0}
		for ep := 2; ep <= arch.Experts && arch.Experts%ep == 0; ep *= 2 {
			w.epDegrees = append(w.epDegrees, ep)
		}
	}
	if arch.Parameters > 0 {
		// A stated count wins; scale the derived parts to it so that the
		// memory and FLOP models stay consistent.
		f := arch.Parameters / w.params
		w.params, w.active, w.embed, w.layerDense, w.expertMLP, w.routed = arch.Parameters, w.active*f, w.embed*f, w.layerDense*f, w.expertMLP*f, w.routed*f
	}
	if p.Task.Training() {
		seqTokens := float64(p.SequenceLength) * float64(p.GlobalBatch)
		if p.Steps > 0 {
			w.steps = float64(p.Steps)
			w.tokens = w.steps * seqTokens
		} else {
			w.tokens = p.Tokens
			w.steps = math.Ceil(p.Tokens / seqTokens)
		}
	}
	if p.Task == LoRA || p.Task == QLoRA {
		w.adapters = loraParams(w)
	}
	kvPrec := p.Precision
	if p.Task == Serving {
		kvPrec = p.Serving.KVCachePrecision
	}
	// KV cache per token: K and V, each kv_heads·head_dim values per layer
	// (Pope et al. 2022 "Efficiently Scaling Transformer Inference" §2;
	// vLLM's cache sizing, Kwon et al. 2023).
	w.kvBytes = 2 * float64(arch.Layers) * float64(arch.KVHeads) * float64(w.headDim) * kvPrec.bytes()
	return w, nil
}

// deriveParams counts parameters from the architecture. Per layer: the
// attention projections q and o (h·h each) and k and v (h·kv·d each), the
// MLP (3·h·f when gated, 2·h·f otherwise) and two norms (2h); an MoE layer
// has instead E routed and S shared experts of width f_e and a router
// (h·E), and its first DenseLayers layers keep the dense MLP. Plus the
// embedding V·h, the output layer V·h unless tied, and the final norm.
// Biases are left out (≤0.1% for the presets). Active parameters count the
// k routed experts a token visits and the shared ones (Fedus et al. 2022
// "Switch Transformers" §2; Dai et al. 2024 "DeepSeekMoE" §3). This is the
// count Hugging Face reports for the presets' config.json files (the
// preset tests check it to 1%).
func (w *workload) deriveParams() {
	a := w.arch
	h, v := float64(a.Hidden), float64(a.Vocab)
	kv := float64(a.KVHeads * w.headDim)
	attn := 2*h*w.attnWidth() + 2*h*kv
	mats := 2.0
	if w.gated {
		mats = 3
	}
	dense := mats * h * float64(a.FFN)
	w.layerDense = attn + 2*h
	w.embed = v * h
	if a.TiedEmbeddings == nil || !*a.TiedEmbeddings {
		w.embed *= 2
	}
	L := float64(a.Layers)
	w.params = L*w.layerDense + w.embed + h
	w.active = w.params
	if a.Experts == 0 {
		w.expertMLP = dense
		w.params += L * dense
		w.active += L * dense
		return
	}
	moeLayers, denseLayers := float64(a.Layers-a.DenseLayers), float64(a.DenseLayers)
	w.expertMLP = mats * h * float64(a.ExpertFFN)
	E, k, S := float64(a.Experts), float64(a.ActiveExperts), float64(a.SharedExperts)
	router := h * E
	w.routed = moeLayers * E * w.expertMLP
	shared := moeLayers * (S*w.expertMLP + router)
	w.params += w.routed + shared + denseLayers*dense
	w.active += moeLayers*k*w.expertMLP + shared + denseLayers*dense
}

// attnWidth is heads·headDim, the width of the queries and of the
// attention output (the hidden size unless headDim says otherwise).
func (w *workload) attnWidth() float64 {
	return float64(w.arch.Heads) * float64(w.headDim)
}

// moeLayers is the number of MoE layers (0 for a dense model).
func (w *workload) moeLayers() int {
	if w.arch.Experts == 0 {
		return 0
	}
	return w.arch.Layers - w.arch.DenseLayers
}

// loraParams counts adapter parameters: r·(in+out) per adapted matrix (Hu
// et al. 2021 "LoRA", §4). all-linear adapts q, k, v, o and the MLP
// matrices of every expert, as QLoRA does (Dettmers et al. 2023, §4).
func loraParams(w workload) float64 {
	a := w.arch
	r, h, f := float64(w.LoRA.Rank), float64(a.Hidden), float64(a.FFN)
	kv := float64(a.KVHeads * w.headDim)
	q := w.attnWidth()
	per := r * ((h + q) + (h + kv) + (h + kv) + (q + h)) // q, k, v, o
	if w.LoRA.Targets == "all-linear" {
		mats := 2.0
		if w.gated {
			mats = 3
		}
		if a.Experts == 0 {
			per += mats * r * (h + f)
		} else {
			fe := float64(a.ExpertFFN)
			moe := float64(w.moeLayers())
			experts := float64(a.Experts + a.SharedExperts)
			return per*float64(a.Layers) + moe*experts*mats*r*(h+fe) + float64(a.DenseLayers)*mats*r*(h+f)
		}
	}
	return per * float64(a.Layers)
}

// overlay returns base with every non-zero field of over applied.
func overlay(base, over Model) Model {
	if over.Parameters != 0 {
		base.Parameters = over.Parameters
	}
	setInt := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setInt(&base.Layers, over.Layers)
	setInt(&base.Hidden, over.Hidden)
	setInt(&base.FFN, over.FFN)
	setInt(&base.Heads, over.Heads)
	setInt(&base.KVHeads, over.KVHeads)
	setInt(&base.HeadDim, over.HeadDim)
	setInt(&base.Vocab, over.Vocab)
	setInt(&base.Experts, over.Experts)
	setInt(&base.ActiveExperts, over.ActiveExperts)
	setInt(&base.SharedExperts, over.SharedExperts)
	setInt(&base.ExpertFFN, over.ExpertFFN)
	setInt(&base.DenseLayers, over.DenseLayers)
	setInt(&base.RouteNodes, over.RouteNodes)
	if over.GatedMLP != nil {
		base.GatedMLP = over.GatedMLP
	}
	if over.TiedEmbeddings != nil {
		base.TiedEmbeddings = over.TiedEmbeddings
	}
	if over.Dropout != nil {
		base.Dropout = over.Dropout
	}
	return base
}

func joinEnum[T ~string](vs []T) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}
