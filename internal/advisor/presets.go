package advisor

import (
	"slices"
	"strings"
)

// Preset is a widely used open model's architecture, copied from the
// model's published configuration. Dropout 0 is each family's published
// setting: Llama, Mistral, Mixtral and Qwen2.5 configs state
// attention_dropout 0.0 and their Hugging Face modules have no hidden
// dropout (transformers models/llama/modeling_llama.py; Meta's reference
// llama/model.py has none), and NeMo's Megatron Llama configs set
// hidden_dropout and attention_dropout to 0.0
// (nemo/collections/llm/gpt/model/llama.py). GPT-3 keeps the masks.
type Preset struct {
	Name  string `json:"name"`
	Model Model  `json:"model"`
	// Context is the model's trained context length.
	Context int `json:"context"`
	// Parameters is the count the model's authors publish, which the
	// derived count must match to 1% (a test checks).
	Parameters float64 `json:"parameters"`
	// Source is where the figures come from.
	Source string `json:"source"`
}

func ptr[T any](v T) *T { return &v }

// presets is a constant table; it is never modified after start-up, and
// LookupPreset returns copies.
var presets = []Preset{
	{Name: "llama-2-7b", Context: 4096, Parameters: 6.74e9,
		Model:  Model{Layers: 32, Hidden: 4096, FFN: 11008, Heads: 32, KVHeads: 32, Vocab: 32000, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023 Table 1"},
	{Name: "llama-2-13b", Context: 4096, Parameters: 13.0e9,
		Model:  Model{Layers: 40, Hidden: 5120, FFN: 13824, Heads: 40, KVHeads: 40, Vocab: 32000, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Llama-2-13b-hf config.json"},
	{Name: "llama-2-70b", Context: 4096, Parameters: 68.98e9,
		Model:  Model{Layers: 80, Hidden: 8192, FFN: 28672, Heads: 64, KVHeads: 8, Vocab: 32000, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Llama-2-70b-hf config.json (GQA, 8 KV heads)"},
	{Name: "llama-3-8b", Context: 8192, Parameters: 8.03e9,
		Model:  Model{Layers: 32, Hidden: 4096, FFN: 14336, Heads: 32, KVHeads: 8, Vocab: 128256, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Meta-Llama-3-8B config.json"},
	{Name: "llama-3-70b", Context: 8192, Parameters: 70.55e9,
		Model:  Model{Layers: 80, Hidden: 8192, FFN: 28672, Heads: 64, KVHeads: 8, Vocab: 128256, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Meta-Llama-3-70B config.json (3.1-70B: same shapes)"},
	{Name: "llama-3.1-405b", Context: 131072, Parameters: 405.8e9,
		Model:  Model{Layers: 126, Hidden: 16384, FFN: 53248, Heads: 128, KVHeads: 8, Vocab: 128256, Dropout: ptr(0.0)},
		Source: "huggingface.co/meta-llama/Llama-3.1-405B config.json; Llama 3 paper (Dubey et al. 2024) Table 3"},
	{Name: "mistral-7b", Context: 32768, Parameters: 7.24e9,
		Model:  Model{Layers: 32, Hidden: 4096, FFN: 14336, Heads: 32, KVHeads: 8, Vocab: 32000, Dropout: ptr(0.0)},
		Source: "huggingface.co/mistralai/Mistral-7B-v0.1 config.json"},
	{Name: "mixtral-8x7b", Context: 32768, Parameters: 46.7e9,
		Model:  Model{Layers: 32, Hidden: 4096, FFN: 14336, Heads: 32, KVHeads: 8, Vocab: 32000, Experts: 8, ActiveExperts: 2, Dropout: ptr(0.0)},
		Source: "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 (46.7B total, 12.9B active)"},
	{Name: "qwen2.5-7b", Context: 32768, Parameters: 7.62e9,
		Model:  Model{Layers: 28, Hidden: 3584, FFN: 18944, Heads: 28, KVHeads: 4, Vocab: 152064, Dropout: ptr(0.0)},
		Source: "huggingface.co/Qwen/Qwen2.5-7B config.json"},
	{Name: "qwen2.5-72b", Context: 32768, Parameters: 72.7e9,
		Model:  Model{Layers: 80, Hidden: 8192, FFN: 29568, Heads: 64, KVHeads: 8, Vocab: 152064, Dropout: ptr(0.0)},
		Source: "huggingface.co/Qwen/Qwen2.5-72B config.json"},
	{Name: "gpt3-175b", Context: 2048, Parameters: 175e9,
		Model:  Model{Layers: 96, Hidden: 12288, FFN: 49152, Heads: 96, Vocab: 51200, GatedMLP: ptr(false), TiedEmbeddings: ptr(true)},
		Source: "Brown et al. 2020 Table 2.1; Narayanan et al. 2021 Table 1 (vocab padded to 51200)"},
}

// LookupPreset finds a preset by name, ignoring case.
func LookupPreset(name string) (Preset, bool) {
	i := slices.IndexFunc(presets, func(p Preset) bool { return strings.EqualFold(p.Name, name) })
	if i < 0 {
		return Preset{}, false
	}
	return presets[i], true
}

// Presets returns every preset, in a fixed order.
func Presets() []Preset { return slices.Clone(presets) }

// PresetNames returns the preset names, in Presets' order.
func PresetNames() []string {
	out := make([]string, len(presets))
	for i, p := range presets {
		out[i] = p.Name
	}
	return out
}
