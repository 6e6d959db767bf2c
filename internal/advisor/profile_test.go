package advisor

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	ft := func(mut func(*Profile)) Profile {
		p := Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e8}
		mut(&p)
		return p
	}
	tests := map[string]struct {
		profile Profile
		want    []string // paths
	}{
		"valid preset":           {profile: ft(func(*Profile) {}), want: nil},
		"zero layers":            {profile: Profile{Task: PreTrain, Tokens: 1, Model: Model{Hidden: 64, Heads: 4, Vocab: 10}}, want: []string{"model.layers"}},
		"heads do not divide":    {profile: ft(func(p *Profile) { p.Model.Hidden = 4100 }), want: []string{"model.heads"}},
		"kv heads do not divide": {profile: ft(func(p *Profile) { p.Model.KVHeads = 5 }), want: []string{"model.kvHeads"}},
		"batch zero means default, negative is refused": {profile: ft(func(p *Profile) { p.GlobalBatch = -1 }), want: []string{"globalBatch"}},
		"unknown preset":         {profile: ft(func(p *Profile) { p.Preset = "llama-9" }), want: []string{"preset"}},
		"unknown precision":      {profile: ft(func(p *Profile) { p.Precision = "fp7" }), want: []string{"precision"}},
		"unknown framework":      {profile: ft(func(p *Profile) { p.Framework = "jax" }), want: []string{"framework"}},
		"megatron framework":     {profile: ft(func(p *Profile) { p.Framework = "megatron" }), want: nil},
		"unknown task":           {profile: ft(func(p *Profile) { p.Task = "distill" }), want: []string{"task"}},
		"int4 full fine-tune":    {profile: ft(func(p *Profile) { p.Precision = INT4 }), want: []string{"precision"}},
		"no amount of work":      {profile: ft(func(p *Profile) { p.Tokens = 0 }), want: []string{"tokens"}},
		"tokens and steps":       {profile: ft(func(p *Profile) { p.Steps = 3 }), want: []string{"steps"}},
		"micro above global":     {profile: ft(func(p *Profile) { p.GlobalBatch, p.MicroBatch = 4, 8 }), want: []string{"microBatch"}},
		"active without experts": {profile: ft(func(p *Profile) { p.Model.ActiveExperts = 2 }), want: []string{"model.experts"}},
		"serving without tokens": {profile: Profile{Preset: "llama-3-8b", Task: Serving}, want: []string{"serving.inputTokens", "serving.outputTokens"}},
		"serving context too short": {profile: Profile{Preset: "llama-3-8b", Task: Serving, Serving: ServingSpec{InputTokens: 100, OutputTokens: 100, ContextLength: 150}},
			want: []string{"serving.contextLength"}},
		"nan tokens": {profile: ft(func(p *Profile) { p.Tokens = math.NaN() }), want: []string{"tokens"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got []string
			fe, _ := tt.profile.Validate().Err().(model.FieldErrors)
			for _, e := range fe {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPresetParameters checks each preset's derived parameter count against
// the count its authors publish (Preset.Source), to 1%.
func TestPresetParameters(t *testing.T) {
	t.Parallel()
	for _, pre := range Presets() {
		t.Run(pre.Name, func(t *testing.T) {
			w, fe := resolve(Profile{Preset: pre.Name, Task: Serving, Serving: ServingSpec{InputTokens: 1, OutputTokens: 1}})
			if fe != nil {
				t.Fatal(fe)
			}
			if rel := math.Abs(w.params/pre.Parameters - 1); rel > 0.01 {
				t.Errorf("derived %.4gB parameters, published %.4gB (%.1f%% off)", w.params/1e9, pre.Parameters/1e9, rel*100)
			}
			if pre.Source == "" {
				t.Error("no source")
			}
		})
	}
}

func TestMixtralActiveParameters(t *testing.T) {
	t.Parallel()
	w, _ := resolve(Profile{Preset: "mixtral-8x7b", Task: Serving, Serving: ServingSpec{InputTokens: 1, OutputTokens: 1}})
	// Jiang et al. 2024: 12.9B active of 46.7B.
	if rel := math.Abs(w.active/12.9e9 - 1); rel > 0.01 {
		t.Errorf("active %.4gB, want 12.9B", w.active/1e9)
	}
}

// TestPinValidation: contradictory or impossible pins are errors naming
// the field; FSDP sharding names map to ZeRO stages.
func TestPinValidation(t *testing.T) {
	t.Parallel()
	base := Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e6}
	z2 := 2
	tests := map[string]struct {
		pin   Pin
		paths []string
	}{
		"tp must divide heads":           {Pin{TP: 3}, []string{"pin.tp"}},
		"zero 3 with pipelining":         {Pin{PP: 2, Sharding: "full-shard"}, []string{"pin.zero"}},
		"sharding contradicts zero":      {Pin{ZeRO: &z2, Sharding: "full-shard"}, []string{"pin.sharding"}},
		"unknown sharding":               {Pin{Sharding: "half"}, []string{"pin.sharding"}},
		"param offload needs stage 3":    {Pin{ZeRO: &z2, OffloadParams: ptr(true)}, []string{"pin.offloadParams"}},
		"degrees do not multiply":        {Pin{GPUs: 8, TP: 2, PP: 2, DP: 4}, []string{"pin.gpus"}},
		"bad recompute":                  {Pin{Recompute: "some"}, []string{"pin.recompute"}},
		"vp without a pipeline":          {Pin{VP: 2}, []string{"pin.vp"}},
		"more chunks than layers":        {Pin{PP: 8, VP: 5}, []string{"pin.vp"}},
		"interleaved pipeline":           {Pin{PP: 4, VP: 4}, nil},
		"zero 3 on one GPU with offload": {Pin{GPUs: 1, Sharding: "full-shard", OffloadOptimizer: ptr(true), OffloadParams: ptr(true)}, nil},
	}
	for name, tt := range tests {
		p := base
		p.Pin = tt.pin
		var got []string
		for _, e := range p.Validate() {
			got = append(got, e.Path)
		}
		if strings.Join(got, ",") != strings.Join(tt.paths, ",") {
			t.Errorf("%s: problems at %v, want %v", name, got, tt.paths)
		}
	}
	w := mustResolve(t, Profile{Preset: "llama-2-7b", Task: FullFineTune, Tokens: 1e6, Pin: Pin{Sharding: "shard-grad-op"}})
	if w.Pin.ZeRO == nil || *w.Pin.ZeRO != 2 {
		t.Errorf("shard-grad-op resolved to %v, want ZeRO 2", w.Pin.ZeRO)
	}
}

// TestActivationStorageByStack checks the per-layer activation terms
// against their derivations: Korthikanti's 34 for a GELU MHA layer with
// a 4h MLP, grouped-query K and V at kv/a, Megatron's fused SwiGLU at
// 6·f/h instead of eager PyTorch's 8·f/h, and FP8 GEMM inputs at 1 byte.
func TestActivationStorageByStack(t *testing.T) {
	t.Parallel()
	per := func(p Profile) float64 {
		w := mustResolve(t, p)
		s, h := 1024.0, float64(w.arch.Hidden)
		return w.activationPerLayer(1024, 1, RecomputeNone) / (s * h)
	}
	gelu := Profile{Task: PreTrain, Tokens: 1e6, Model: Model{Layers: 4, Hidden: 1024, FFN: 4096, Heads: 16, Vocab: 1000, GatedMLP: ptr(false)}}
	if got := per(gelu); math.Abs(got-34) > 1e-9 {
		t.Errorf("GELU MHA layer: %.3f bytes per token per hidden unit, want Korthikanti's 34", got)
	}
	gqa := Profile{Task: PreTrain, Tokens: 1e6, Model: Model{Layers: 4, Hidden: 1024, FFN: 2048, Heads: 16, KVHeads: 2, Vocab: 1000}}
	// attention 7+4·2/16 = 7.5, norms 4, gated MLP 3+8·2 = 19.
	if got := per(gqa); math.Abs(got-30.5) > 1e-9 {
		t.Errorf("gated GQA layer: %.3f, want 30.5", got)
	}
	meg := gqa
	meg.Framework = "megatron"
	if got := per(meg); math.Abs(got-26.5) > 1e-9 {
		t.Errorf("megatron gated GQA layer: %.3f, want 26.5 (fc1 out + fc2 in, 6·f/h)", got)
	}
	fp8 := meg
	fp8.Precision = FP8
	if got := per(fp8); math.Abs(got-23.5) > 1e-9 {
		t.Errorf("megatron FP8 layer: %.3f, want 23.5 (−(1+f/h))", got)
	}
}

// TestActivationWithoutDropout checks the dropout-free terms by hand:
// Korthikanti et al.'s 34 is 11 (attention, 1 of it the output dropout
// mask) + 19 (MLP, 1 of it its mask) + 4, and eager attention's 5·a·s²
// is softmax 2 + mask 1 + dropped-out scores 2. At dropout 0 the layer
// keeps 32 and 2·a·s².
func TestActivationWithoutDropout(t *testing.T) {
	t.Parallel()
	const seq = 1024
	per := func(p Profile, rc Recompute) float64 {
		w := mustResolve(t, p)
		return w.activationPerLayer(seq, 1, rc) / (seq * float64(w.arch.Hidden))
	}
	// h 1024, a 16: a·s/h = 16, so eager scores add 5·16 = 80 with
	// dropout and 2·16 = 32 without.
	gelu := Profile{Task: PreTrain, Tokens: 1e6, Model: Model{Layers: 4, Hidden: 1024, FFN: 4096, Heads: 16, Vocab: 1000, GatedMLP: ptr(false)}}
	noDrop := gelu
	noDrop.Model.Dropout = ptr(0.0)
	eager, eagerNoDrop := gelu, noDrop
	eager.Attention, eagerNoDrop.Attention = Eager, Eager
	lowDrop := gelu
	lowDrop.Model.Dropout = ptr(0.1)
	for _, c := range []struct {
		name string
		p    Profile
		rc   Recompute
		want float64
	}{
		{"flash, dropout unset (Korthikanti)", gelu, RecomputeNone, 34},
		{"flash, dropout 0.1", lowDrop, RecomputeNone, 34},
		{"flash, dropout 0", noDrop, RecomputeNone, 32},
		{"eager, dropout unset", eager, RecomputeNone, 34 + 80},
		{"eager, dropout 0", eagerNoDrop, RecomputeNone, 32 + 32},
		{"eager selective, dropout 0", eagerNoDrop, RecomputeSelective, 32},
		{"full recompute, dropout 0 (layer input only)", noDrop, RecomputeFull, 2},
	} {
		if got := per(c.p, c.rc); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: %.3f bytes per token per hidden unit, want %g", c.name, got, c.want)
		}
	}
	// Megatron FP8 gated GQA (TestActivationStorageByStack's 23.5) less
	// the two masks: 21.5.
	fp8 := Profile{Task: PreTrain, Tokens: 1e6, Precision: FP8, Framework: "megatron", Model: Model{Layers: 4, Hidden: 1024, FFN: 2048, Heads: 16, KVHeads: 2, Vocab: 1000, Dropout: ptr(0.0)}}
	if got := per(fp8, RecomputeNone); math.Abs(got-21.5) > 1e-9 {
		t.Errorf("megatron FP8 layer, dropout 0: %.3f, want 21.5", got)
	}
	// Presets carry their family's published dropout; a profile overrides.
	if w := mustResolve(t, Profile{Preset: "llama-3-8b", Task: PreTrain, Tokens: 1e6}); w.dropout {
		t.Error("llama-3-8b: masks stored, want none (its config trains without dropout)")
	}
	if w := mustResolve(t, Profile{Preset: "llama-3-8b", Task: PreTrain, Tokens: 1e6, Model: Model{Dropout: ptr(0.1)}}); !w.dropout {
		t.Error("llama-3-8b with model.dropout 0.1: no masks, want them")
	}
	if w := mustResolve(t, Profile{Preset: "gpt3-175b", Task: PreTrain, Tokens: 1e6}); !w.dropout {
		t.Error("gpt3-175b: no masks, want Korthikanti's count")
	}
	bad := Profile{Preset: "llama-3-8b", Task: PreTrain, Tokens: 1e6, Model: Model{Dropout: ptr(1.0)}}
	if fe := bad.Validate(); len(fe) == 0 || !strings.Contains(fe.Error(), "model.dropout") {
		t.Errorf("dropout 1: errors %v, want one at model.dropout", fe)
	}
}
