package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpufleet/gpufleet/internal/advisor"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/server"
)

func newAdviseCmd(g *globals) *cobra.Command {
	var (
		out, file, deadline, targetLatency string
		req                                advisor.Request
		p                                  = &req.Profile
		gated, tied                        bool
		zero                               int
		dropout                            float64
		offloadOpt, offloadParams, plan    bool
	)
	cmd := &cobra.Command{
		Use:   "advise",
		Short: "Which GPUs, how many, how long and for how much: rank every offer for a workload",
		Long: `Estimate a training or serving workload on every offer in the built-in catalog:
memory per GPU (weights, gradients, optimizer, activations, KV cache, overhead),
the cheapest parallel plan that fits (tensor/pipeline/data parallel, ZeRO stage,
recomputation, offload, micro-batch), time to finish and cost to finish on
on-demand, spot (with interruption overhead) and reserved (derived) prices.

Describe the model with --preset or the architecture flags, the task with
--task, and the amount of work with --tokens or --steps (training) or the
--input-tokens/--output-tokens/--concurrency of serving. -f reads the same
document POST /v1/advise takes (YAML or JSON); flags given as well override it.

No server is needed. Rates measured by 'gpufleet bench' in the data dir are
used when present. Presets: ` + strings.Join(advisor.PresetNames(), ", ") + `.`,
		Example: `  gpufleet advise --preset llama-2-70b --task full-finetune --tokens 1e8 --gpu A100,A100-80GB --provider aws --parallelism data
  gpufleet advise --preset llama-3-8b --task qlora --tokens 2e7 --spot --limit 10
  gpufleet advise --preset llama-3-70b --task serving --input-tokens 1000 --output-tokens 200 --concurrency 64 --target-latency 10s
  gpufleet advise --layers 32 --hidden 4096 --heads 32 --vocab 32000 --task pretrain --tokens 2e11 --deadline 72h
  gpufleet advise --preset llama-3-8b --task full-finetune --tokens 1e9 --instance-type p5.48xlarge --price-per-gpu-hour 2.5
  gpufleet advise -f workload.yaml --explain -o json
  gpufleet advise --task pretrain --preset llama-3-70b --tokens 1e10 --precision fp8 --framework megatron --seq 8192 --global-batch 256 --micro-batch 1 --num-gpus 64 --tp 4 --pp 8 --vp 5 --instance-type p5.48xlarge --plan
  gpufleet advise --task pretrain --tokens 1.48e13 --layers 61 --hidden 7168 --ffn 18432 --heads 128 --vocab 129280 --experts 256 --active-experts 8 --shared-experts 1 --expert-ffn 2048 --dense-layers 3 --route-nodes 4 --precision fp8 --seq 4096 --global-batch 15360 --num-gpus 2048 --tp 1 --pp 16 --ep 64 --zero 1 --overlap-expert-comm --instance-type p5.48xlarge --max-nodes 256 --plan`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			flags := cmd.Flags()
			if file != "" {
				var fromFile advisor.Request
				if err := readRequest(file, &fromFile); err != nil {
					return err
				}
				// Flags the user gave override the file: replay them on it.
				overlay := fromFile
				replayFlags(flags, &overlay, &req)
				req = overlay
				p = &req.Profile
			}
			if flags.Changed("gated-mlp") {
				p.Model.GatedMLP = &gated
			}
			if flags.Changed("tied-embeddings") {
				p.Model.TiedEmbeddings = &tied
			}
			if flags.Changed("dropout") {
				p.Model.Dropout = &dropout
			}
			if flags.Changed("zero") {
				p.Pin.ZeRO = &zero
			}
			if flags.Changed("offload-optimizer") {
				p.Pin.OffloadOptimizer = &offloadOpt
			}
			if flags.Changed("offload-params") {
				p.Pin.OffloadParams = &offloadParams
			}
			if plan {
				// Exactly the pinned configuration, on its cheapest offer,
				// with every term.
				req.Explain, req.Limit = true, 1
			}
			if deadline != "" {
				d, err := model.ParseDuration(deadline)
				if err != nil {
					return fmt.Errorf("--deadline: %w", err)
				}
				req.Deadline = d
			}
			if targetLatency != "" {
				d, err := model.ParseDuration(targetLatency)
				if err != nil {
					return fmt.Errorf("--target-latency: %w", err)
				}
				p.Serving.TargetLatency = d
			}
			spot, _ := flags.GetBool("spot")
			onDemand, _ := flags.GetBool("on-demand")
			switch {
			case spot && onDemand:
				return fmt.Errorf("--spot and --on-demand exclude each other; use --capacity on-demand,spot for both")
			case spot:
				req.Capacity = []string{"spot"}
			case onDemand:
				req.Capacity = []string{"on-demand"}
			}
			cat, err := catalog.Load()
			if err != nil {
				return err
			}
			if problems := req.Validate(cat.KnownGPU); len(problems) > 0 {
				return fmt.Errorf("the workload is invalid: %w (see gpufleet advise --help)", problems.Err())
			}
			for i, name := range req.GPUs {
				if c, ok := cat.CanonicalGPU(name); ok {
					req.GPUs[i] = c
				}
			}
			cal, calNote, err := server.LoadCalibration(g.dataDir)
			if err != nil {
				return err
			}
			res, err := advisor.Rank(req.Profile, req.Options(cat.Offers(), cat.Accelerator, cal))
			if err != nil {
				return fmt.Errorf("the workload is invalid: %w", err)
			}
			if calNote != "" {
				res.Assumptions = append(res.Assumptions, calNote)
			}
			if out != "table" {
				return render(cmd.OutOrStdout(), out, res, nil)
			}
			if plan {
				return planTable(cmd.OutOrStdout(), res)
			}
			return adviseTable(cmd.OutOrStdout(), res, req.Explain)
		},
	}
	fl := cmd.Flags()
	outputFlag(cmd, &out)
	fl.StringVarP(&file, "file", "f", "", "read the request (profile and filters) from a YAML or JSON file")
	// Workload.
	fl.StringVar(&p.Preset, "preset", "", "a named open model (see the list above)")
	fl.StringVar((*string)(&p.Task), "task", "", "pretrain, full-finetune, lora, qlora or serving")
	fl.StringVar((*string)(&p.Precision), "precision", "", "fp32, bf16 (default), fp16, fp8, int8, int4 or nf4")
	fl.StringVar(&p.Framework, "framework", "", "training stack whose activation storage applies: pytorch (default) or megatron (fused SwiGLU)")
	fl.StringVar((*string)(&p.Optimizer), "optimizer", "", "adamw (default), adam8bit, sgd or adafactor")
	fl.StringVar((*string)(&p.Attention), "attention", "", "flash (default) or eager")
	fl.StringVar(&p.Parallelism, "parallelism", "", "auto (tensor+pipeline+data, default) or data (ZeRO/FSDP only)")
	fl.IntVar(&p.SequenceLength, "seq", 0, "tokens per training sequence (default 2048, 4096 for long-context presets)")
	fl.IntVar(&p.MicroBatch, "micro-batch", 0, "sequences per GPU per pass (default: searched)")
	fl.IntVar(&p.GlobalBatch, "global-batch", 0, "sequences per optimizer step (default 512 pre-train, 64 fine-tune)")
	fl.Float64Var(&p.Tokens, "tokens", 0, "training tokens to process (e.g. 1e9)")
	fl.IntVar(&p.Steps, "steps", 0, "optimizer steps (instead of --tokens)")
	fl.IntVar(&p.LoRA.Rank, "lora-rank", 0, "LoRA rank (default 16)")
	fl.StringVar(&p.LoRA.Targets, "lora-targets", "", "all-linear (default) or attention")
	// Model architecture (overrides a preset).
	fl.Float64Var(&p.Model.Parameters, "params", 0, "total parameters (default: derived from the architecture)")
	fl.IntVar(&p.Model.Layers, "layers", 0, "transformer layers")
	fl.IntVar(&p.Model.Hidden, "hidden", 0, "hidden size")
	fl.IntVar(&p.Model.FFN, "ffn", 0, "MLP intermediate size (default 4×hidden)")
	fl.IntVar(&p.Model.Heads, "heads", 0, "attention heads")
	fl.IntVar(&p.Model.KVHeads, "kv-heads", 0, "key/value heads (default: heads)")
	fl.IntVar(&p.Model.HeadDim, "head-dim", 0, "width of one attention head (default hidden/heads; Qwen3, GPT-OSS set it apart)")
	fl.IntVar(&p.Model.Vocab, "vocab", 0, "vocabulary size")
	fl.IntVar(&p.Model.Experts, "experts", 0, "MoE experts per layer")
	fl.IntVar(&p.Model.ActiveExperts, "active-experts", 0, "MoE routed experts per token (top-k)")
	fl.IntVar(&p.Model.SharedExperts, "shared-experts", 0, "MoE shared experts every token passes through (DeepSeek-V3: 1)")
	fl.IntVar(&p.Model.ExpertFFN, "expert-ffn", 0, "MoE: one expert's intermediate size (default --ffn)")
	fl.IntVar(&p.Model.DenseLayers, "dense-layers", 0, "MoE: first layers that keep a dense MLP of --ffn (DeepSeek-V3: 3)")
	fl.IntVar(&p.Model.RouteNodes, "route-nodes", 0, "MoE: node-limited routing, most nodes a token's experts lie on (DeepSeek-V3: 4)")
	fl.BoolVar(&gated, "gated-mlp", true, "SwiGLU-style MLP with three matrices")
	fl.BoolVar(&tied, "tied-embeddings", false, "output layer shares the input embedding")
	fl.Float64Var(&dropout, "dropout", 0, "training dropout probability; 0 stores no dropout masks (default: the preset's published value, else masks counted)")
	// Serving.
	fl.IntVar(&p.Serving.InputTokens, "input-tokens", 0, "serving: mean prompt tokens")
	fl.IntVar(&p.Serving.OutputTokens, "output-tokens", 0, "serving: mean output tokens")
	fl.IntVar(&p.Serving.ContextLength, "context", 0, "serving: longest context (default input+output)")
	fl.IntVar(&p.Serving.Concurrency, "concurrency", 0, "serving: sequences in flight (default 1)")
	fl.Float64Var(&p.Serving.TargetTokensPerSecond, "target-tps", 0, "serving: output tokens per second to sustain")
	fl.StringVar(&targetLatency, "target-latency", "", "serving: longest end-to-end request time (e.g. 5s)")
	fl.Float64Var(&p.Serving.TotalTokens, "total-tokens", 0, "serving: output tokens to produce, for a cost to finish")
	fl.StringVar((*string)(&p.Serving.KVCachePrecision), "kv-precision", "", "serving: KV cache format (bf16 default, fp8, int8)")
	// Offers.
	fl.StringSliceVar(&req.GPUs, "gpu", nil, "GPU models to consider (e.g. A100,A100-80GB)")
	fl.StringSliceVar(&req.Providers, "provider", nil, "providers: aws, gcp, azure, oci, lambda, vast")
	fl.StringSliceVar(&req.Regions, "region", nil, "region patterns (e.g. 'us-*')")
	fl.StringSliceVar(&req.Capacity, "capacity", nil, "capacity types: on-demand, spot, reserved (default all)")
	fl.Bool("spot", false, "spot offers only")
	fl.Bool("on-demand", false, "on-demand offers only")
	fl.StringVar(&req.ReservedTerm, "reserved-term", "", "reserved price term: 1y (default), 3y or none")
	fl.StringVar(&deadline, "deadline", "", "finish within this time (e.g. 48h); plans that miss it rank last")
	fl.IntVar(&req.MaxNodes, "max-nodes", 0, "most nodes of one instance type (default 64, at most 4096)")
	fl.IntVar(&req.Limit, "limit", 20, "most rows to show (-1: all)")
	fl.BoolVar(&req.Explain, "explain", false, "show each row's memory and time breakdown, every term with its formula")
	fl.Float64Var(&req.MeasuredTFLOPS, "tflops", 0, "training: your measured model TFLOP/s per GPU (replaces the utilisation model; read as a run with the recomputation pinned by --recompute, else none)")
	fl.Float64Var(&req.MeasuredTokensPerSecond, "tokens-per-second", 0, "training: your measured tokens/s per GPU (e.g. global batch tokens ÷ step time ÷ GPUs); read as a run with the recomputation pinned by --recompute, else none: pin the measured run's mode")
	fl.Float64Var(&req.PricePerGPUHour, "price-per-gpu-hour", 0, "price every offer at this USD rate per GPU-hour instead of its listed price (your negotiated rate or own hardware; reserved rows are left out)")
	fl.StringSliceVar(&req.InstanceTypes, "instance-type", nil, "instance-type patterns (e.g. 'p4d.*,p5.48xlarge')")
	// Plan pins (training): what is set is fixed, the rest searched.
	fl.IntVar(&p.Pin.GPUs, "num-gpus", 0, "pin: total GPUs (whole nodes of an offer)")
	fl.IntVar(&p.Pin.Nodes, "nodes", 0, "pin: nodes")
	fl.IntVar(&p.Pin.TP, "tp", 0, "pin: tensor parallel degree")
	fl.IntVar(&p.Pin.PP, "pp", 0, "pin: pipeline parallel degree")
	fl.IntVar(&p.Pin.DP, "dp", 0, "pin: data parallel degree")
	fl.IntVar(&p.Pin.CP, "cp", 0, "pin: context parallel degree (sequence split over GPUs)")
	fl.IntVar(&p.Pin.VP, "vp", 0, "pin: virtual pipeline stages per GPU (Megatron's interleaved 1F1B; needs pp >= 2)")
	fl.IntVar(&p.Pin.EP, "ep", 0, "pin: MoE expert parallel degree (divides dp and the experts)")
	fl.BoolVar(&p.Pin.OverlapExpertComm, "overlap-expert-comm", false, "MoE: the framework hides the expert all-to-all behind compute (DualPipe, Megatron --overlap-moe-expert-parallel-comm)")
	fl.IntVar(&zero, "zero", 0, "pin: ZeRO stage 0-3")
	fl.StringVar(&p.Pin.Sharding, "sharding", "", "pin: FSDP sharding no-shard, shard-grad-op or full-shard")
	fl.StringVar((*string)(&p.Pin.Recompute), "recompute", "", "pin: activation recomputation none, selective or full")
	fl.BoolVar(&offloadOpt, "offload-optimizer", false, "pin: optimizer states on the host (ZeRO-Offload); =false forbids it")
	fl.BoolVar(&offloadParams, "offload-params", false, "pin: ZeRO-3 weights on the host (ZeRO-Infinity, FSDP CPUOffload); =false forbids it")
	fl.BoolVar(&plan, "plan", false, "print exactly the pinned configuration on its cheapest offer: every memory and time term with its formula")
	for name, vals := range map[string][]string{
		"task": {"pretrain", "full-finetune", "lora", "qlora", "serving"}, "preset": advisor.PresetNames(),
		"precision": {"fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4"}, "optimizer": {"adamw", "adam8bit", "sgd", "adafactor"},
		"parallelism": {"auto", "data"}, "provider": {"aws", "gcp", "azure", "oci", "lambda", "vast"},
		"capacity": {"on-demand", "spot", "reserved"}, "reserved-term": {"1y", "3y", "none"},
		"sharding": {"no-shard", "shard-grad-op", "full-shard"}, "framework": {"pytorch", "megatron"}, "recompute": {"none", "selective", "full"},
	} {
		_ = cmd.RegisterFlagCompletionFunc(name, func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return vals, cobra.ShellCompDirectiveNoFileComp
		})
	}
	return cmd
}

// readRequest decodes an advise request file strictly.
func readRequest(path string, req *advisor.Request) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	var problems model.FieldErrors
	if strings.HasSuffix(path, ".json") {
		problems = manifest.DecodeJSON(data, req)
	} else {
		problems = manifest.DecodeYAML(data, req)
	}
	if err := problems.Err(); err != nil {
		return fmt.Errorf("%s is invalid: %w", path, err)
	}
	return nil
}

// replayFlags copies the values of the flags the user set from the
// flag-bound request src onto dst, so that a flag overrides the file.
func replayFlags(flags *pflag.FlagSet, dst, src *advisor.Request) {
	// --spot, --on-demand, --deadline, --target-latency, --gated-mlp,
	// --tied-embeddings, --dropout, --zero, --offload-optimizer and
	// --offload-params are applied after the merge.
	flags.Visit(func(f *pflag.Flag) { setRequestField(dst, src, f.Name) })
}

// setRequestField copies one flag's field from src to dst.
func setRequestField(dst, src *advisor.Request, name string) {
	d, s := &dst.Profile, &src.Profile
	switch name {
	case "preset":
		d.Preset = s.Preset
	case "task":
		d.Task = s.Task
	case "precision":
		d.Precision = s.Precision
	case "framework":
		d.Framework = s.Framework
	case "optimizer":
		d.Optimizer = s.Optimizer
	case "attention":
		d.Attention = s.Attention
	case "parallelism":
		d.Parallelism = s.Parallelism
	case "seq":
		d.SequenceLength = s.SequenceLength
	case "micro-batch":
		d.MicroBatch = s.MicroBatch
	case "global-batch":
		d.GlobalBatch = s.GlobalBatch
	case "tokens":
		d.Tokens = s.Tokens
	case "steps":
		d.Steps = s.Steps
	case "lora-rank":
		d.LoRA.Rank = s.LoRA.Rank
	case "lora-targets":
		d.LoRA.Targets = s.LoRA.Targets
	case "params":
		d.Model.Parameters = s.Model.Parameters
	case "layers":
		d.Model.Layers = s.Model.Layers
	case "hidden":
		d.Model.Hidden = s.Model.Hidden
	case "ffn":
		d.Model.FFN = s.Model.FFN
	case "heads":
		d.Model.Heads = s.Model.Heads
	case "kv-heads":
		d.Model.KVHeads = s.Model.KVHeads
	case "head-dim":
		d.Model.HeadDim = s.Model.HeadDim
	case "vocab":
		d.Model.Vocab = s.Model.Vocab
	case "experts":
		d.Model.Experts = s.Model.Experts
	case "active-experts":
		d.Model.ActiveExperts = s.Model.ActiveExperts
	case "shared-experts":
		d.Model.SharedExperts = s.Model.SharedExperts
	case "expert-ffn":
		d.Model.ExpertFFN = s.Model.ExpertFFN
	case "dense-layers":
		d.Model.DenseLayers = s.Model.DenseLayers
	case "route-nodes":
		d.Model.RouteNodes = s.Model.RouteNodes
	case "input-tokens":
		d.Serving.InputTokens = s.Serving.InputTokens
	case "output-tokens":
		d.Serving.OutputTokens = s.Serving.OutputTokens
	case "context":
		d.Serving.ContextLength = s.Serving.ContextLength
	case "concurrency":
		d.Serving.Concurrency = s.Serving.Concurrency
	case "target-tps":
		d.Serving.TargetTokensPerSecond = s.Serving.TargetTokensPerSecond
	case "total-tokens":
		d.Serving.TotalTokens = s.Serving.TotalTokens
	case "kv-precision":
		d.Serving.KVCachePrecision = s.Serving.KVCachePrecision
	case "gpu":
		dst.GPUs = src.GPUs
	case "provider":
		dst.Providers = src.Providers
	case "region":
		dst.Regions = src.Regions
	case "capacity":
		dst.Capacity = src.Capacity
	case "reserved-term":
		dst.ReservedTerm = src.ReservedTerm
	case "max-nodes":
		dst.MaxNodes = src.MaxNodes
	case "limit":
		dst.Limit = src.Limit
	case "explain":
		dst.Explain = src.Explain
	case "instance-type":
		dst.InstanceTypes = src.InstanceTypes
	case "tflops":
		dst.MeasuredTFLOPS = src.MeasuredTFLOPS
	case "tokens-per-second":
		dst.MeasuredTokensPerSecond = src.MeasuredTokensPerSecond
	case "price-per-gpu-hour":
		dst.PricePerGPUHour = src.PricePerGPUHour
	case "num-gpus":
		d.Pin.GPUs = s.Pin.GPUs
	case "nodes":
		d.Pin.Nodes = s.Pin.Nodes
	case "tp":
		d.Pin.TP = s.Pin.TP
	case "pp":
		d.Pin.PP = s.Pin.PP
	case "dp":
		d.Pin.DP = s.Pin.DP
	case "cp":
		d.Pin.CP = s.Pin.CP
	case "ep":
		d.Pin.EP = s.Pin.EP
	case "vp":
		d.Pin.VP = s.Pin.VP
	case "overlap-expert-comm":
		d.Pin.OverlapExpertComm = s.Pin.OverlapExpertComm
	case "sharding":
		d.Pin.Sharding = s.Pin.Sharding
	case "recompute":
		d.Pin.Recompute = s.Pin.Recompute
	} // other flags (--data-dir, --output, …) are not request fields
}

// adviseTable writes the ranking, then what was not estimated and the
// assumptions; with explain, each row's breakdown.
func adviseTable(w io.Writer, res advisor.Result, explain bool) error {
	ws := res.Workload
	fmt.Fprintf(w, "%s %s: %.3gB parameters (%.3gB active)", ws.Task, ws.Model, ws.Parameters/1e9, ws.ActiveParameters/1e9)
	if ws.Task.Training() {
		fmt.Fprintf(w, ", %.3g tokens, %.0f steps, %.3g FLOPs, model states %s, checkpoint %s", ws.Tokens, ws.Steps, ws.ModelFLOPs, gib(ws.ModelStatesBytes), gib(ws.CheckpointBytes))
	} else {
		fmt.Fprintf(w, ", KV cache %s per token", model.Bytes(ws.KVCachePerTokenBytes))
	}
	fmt.Fprintln(w)
	if len(res.Rows) == 0 {
		fmt.Fprintln(w, "no offer fits.")
		if res.Shortfall != nil {
			fmt.Fprintln(w, res.Shortfall.Message)
		}
	} else {
		serving := !ws.Task.Training()
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if serving {
			row(tw, "#", "PROVIDER", "REGION", "INSTANCE", "GPUS", "CAPACITY", "PLAN", "TOK/S", "$/H", "$/MTOK", "COST", "MARGIN/GPU", "NOTES")
		} else {
			row(tw, "#", "PROVIDER", "REGION", "INSTANCE", "GPUS", "CAPACITY", "PLAN", "TIME", "COST", "$/H", "MARGIN/GPU", "NOTES")
		}
		for i, r := range res.Rows {
			gpus := fmt.Sprintf("%d×%s", r.GPUs, r.GPU)
			loc := r.Region
			if r.Zone != "" {
				loc += "/" + r.Zone
			}
			capacity := r.Capacity
			if r.Derived {
				capacity += "*"
			}
			notes := "-"
			if n := len(r.Assumptions); n > 0 {
				notes = fmt.Sprintf("%d", n)
			}
			if !r.MeetsTarget {
				notes += " misses target"
			}
			if serving {
				cost := "-"
				if r.Cost > 0 {
					cost = money(r.Cost)
				}
				row(tw, i+1, r.Provider, loc, r.InstanceType, gpus, capacity, r.PlanText, fmt.Sprintf("%.0f", r.TokensPerSecond),
					money(r.CostPerHour), fmt.Sprintf("$%.3f", r.PerMTokens), cost, gib(r.MarginBytes), notes)
			} else {
				row(tw, i+1, r.Provider, loc, r.InstanceType, gpus, capacity, r.PlanText, hours(r.Hours),
					money(r.Cost), money(r.CostPerHour), gib(r.MarginBytes), notes)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "%d of %d ranked rows shown, from %d offers (* = reserved price derived from on-demand); -o json for every field, --explain for breakdowns\n", len(res.Rows), res.Ranked, res.Offers)
	}
	if explain {
		for i, r := range res.Rows {
			explainRow(w, i+1, r)
		}
	}
	if len(res.NotEstimated) > 0 {
		fmt.Fprintln(w, "\nnot estimated:")
		for _, ne := range res.NotEstimated {
			fmt.Fprintf(w, "  %s (%d offers): %s\n", ne.GPU, ne.Offers, ne.Reason)
		}
	}
	fmt.Fprintln(w, "\nassumptions:")
	for _, a := range res.Assumptions {
		fmt.Fprintln(w, "  - "+a)
	}
	return nil
}

func explainRow(w io.Writer, n int, r advisor.Row) {
	fmt.Fprintf(w, "\n#%d %s %s %s %s ×%d nodes: %s\n", n, r.Provider, r.Region, r.InstanceType, r.Capacity, r.Nodes, r.PlanText)
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "  memory per GPU: %s of %s\n", gib(m.TotalBytes), gib(m.CapacityBytes))
		for _, t := range m.Terms {
			fmt.Fprintf(w, "    %-42s %10s  %s\n", t.Name, gib(int64(t.Bytes)), t.Formula)
		}
		if m.HostBytesPerNode > 0 {
			fmt.Fprintf(w, "    %-42s %10s  %s\n", "host memory per node (offload)", gib(m.HostBytesPerNode), "DeepSpeed estimator: partitions × GPUs per node × 1.5")
		}
	}
	if t := r.Timing; t != nil {
		if t.TokensPerSecond > 0 {
			fmt.Fprintf(w, "  per replica: %.0f output tok/s, TTFT %.3fs, %.1f ms/token, request %.2fs\n", t.TokensPerSecond, t.TTFT, t.TPOT*1e3, t.Latency)
		} else {
			fmt.Fprintf(w, "  time: %.3g FLOPs at %.0f TFLOP/s per GPU (MFU %.2f), %.0f steps\n", t.FLOPs, t.RatePerGPU/1e12, t.MFU, t.Steps)
		}
		for _, term := range t.Terms {
			fmt.Fprintf(w, "    %-42s %10.3fs  %s\n", term.Name, term.Seconds, term.Formula)
		}
	}
	if r.SpotOverhead > 0 {
		fmt.Fprintf(w, "  spot: +%.1f%% expected time, checkpoint every %s\n", r.SpotOverhead*100, r.CheckpointEvery)
	}
	for _, a := range r.Assumptions {
		fmt.Fprintln(w, "  - "+a)
	}
}

// planTable prints the one pinned plan: the workload line, its cheapest
// offer and every term.
func planTable(w io.Writer, res advisor.Result) error {
	ws := res.Workload
	fmt.Fprintf(w, "%s %s: %.3gB parameters, largest layer %.3gM parameters\n", ws.Task, ws.Model, ws.Parameters/1e9, ws.LargestLayerParams/1e6)
	if len(res.Rows) == 0 {
		fmt.Fprintln(w, "the pinned plan fits no offer.")
		if res.Shortfall != nil {
			fmt.Fprintln(w, res.Shortfall.Message)
		}
		return nil
	}
	r := res.Rows[0]
	fmt.Fprintf(w, "plan: %s on %d×%s, cheapest offer %s %s %s (%s), %s, %s\n", r.PlanText, r.GPUs, r.GPU, r.Provider, r.Region, r.InstanceType, r.Capacity, hours(r.Hours), money(r.Cost))
	explainRow(w, 1, r)
	return nil
}

func gib(b int64) string {
	g := float64(b) / float64(model.GiB)
	if g < 0.1 && g > 0 {
		return fmt.Sprintf("%.0fMi", g*1024)
	}
	return fmt.Sprintf("%.1fGi", g)
}

func money(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("$%.0f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

func hours(h float64) string {
	switch {
	case h >= 48:
		return fmt.Sprintf("%.1fd", h/24)
	case h >= 1:
		return fmt.Sprintf("%.1fh", h)
	}
	return fmt.Sprintf("%.0fm", h*60)
}
