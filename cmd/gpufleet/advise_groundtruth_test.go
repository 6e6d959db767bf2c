package main

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
)

// requestFlags maps every field path of an advise request to the flag that
// sets it.
var requestFlags = map[string]string{
	"profile.preset": "preset", "profile.task": "task", "profile.precision": "precision",
	"profile.optimizer": "optimizer", "profile.attention": "attention", "profile.parallelism": "parallelism",
	"profile.sequenceLength": "seq", "profile.globalBatch": "global-batch", "profile.microBatch": "micro-batch",
	"profile.tokens": "tokens", "profile.steps": "steps", "profile.lora.rank": "lora-rank", "profile.lora.targets": "lora-targets",
	"profile.model.parameters": "params", "profile.model.layers": "layers", "profile.model.hidden": "hidden",
	"profile.model.ffn": "ffn", "profile.model.heads": "heads", "profile.model.kvHeads": "kv-heads",
	"profile.model.vocab": "vocab", "profile.model.experts": "experts", "profile.model.activeExperts": "active-experts",
	"profile.model.sharedExperts": "shared-experts", "profile.model.expertFFN": "expert-ffn", "profile.model.denseLayers": "dense-layers",
	"profile.model.routeNodes": "route-nodes", "profile.model.headDim": "head-dim", "profile.pin.ep": "ep", "profile.pin.overlapExpertComm": "overlap-expert-comm",
	"profile.model.gatedMLP": "gated-mlp", "profile.model.tiedEmbeddings": "tied-embeddings", "profile.model.dropout": "dropout",
	"profile.serving.inputTokens": "input-tokens", "profile.serving.outputTokens": "output-tokens",
	"profile.serving.contextLength": "context", "profile.serving.concurrency": "concurrency",
	"profile.serving.targetTokensPerSecond": "target-tps", "profile.serving.targetLatency": "target-latency",
	"profile.serving.totalTokens": "total-tokens", "profile.serving.kvCachePrecision": "kv-precision",
	"profile.pin.gpus": "num-gpus", "profile.pin.nodes": "nodes", "profile.pin.tp": "tp", "profile.pin.pp": "pp",
	"profile.pin.dp": "dp", "profile.pin.cp": "cp", "profile.pin.zero": "zero", "profile.pin.sharding": "sharding",
	"profile.pin.recompute": "recompute", "profile.pin.offloadOptimizer": "offload-optimizer",
	"profile.pin.offloadParams": "offload-params", "profile.pin.vp": "vp", "profile.framework": "framework",
	"gpus": "gpu", "providers": "provider", "regions": "region", "capacity": "capacity", "instanceTypes": "instance-type",
	"reservedTerm": "reserved-term", "deadline": "deadline", "maxNodes": "max-nodes", "limit": "limit", "explain": "explain",
	"measuredTFLOPS": "tflops", "measuredTokensPerSecond": "tokens-per-second", "pricePerGPUHour": "price-per-gpu-hour",
}

// TestGroundTruthCasesHaveFlags: every field any ground-truth case's
// request sets (internal/advisor/testdata/groundtruth.json) has an advise
// flag, so each published case can be typed on the command line, not
// only given as a file.
func TestGroundTruthCasesHaveFlags(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../internal/advisor/testdata/groundtruth.json")
	if err != nil {
		t.Fatal(err)
	}
	var gt struct {
		Cases []struct {
			ID      string         `json:"id"`
			Request map[string]any `json:"request"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &gt); err != nil {
		t.Fatal(err)
	}
	flags := newAdviseCmd(&globals{}).Flags()
	for name := range requestFlags {
		if f := flags.Lookup(requestFlags[name]); f == nil {
			t.Errorf("%s: no flag --%s", name, requestFlags[name])
		}
	}
	used := map[string]bool{}
	for _, c := range gt.Cases {
		for _, path := range leafPaths("", c.Request) {
			used[path] = true
			if _, ok := requestFlags[path]; !ok {
				t.Errorf("case %q sets %s, which no advise flag sets", c.ID, path)
			}
		}
	}
	if len(gt.Cases) == 0 || len(used) == 0 {
		t.Fatal("no cases read")
	}
	paths := make([]string, 0, len(used))
	for p := range used {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	t.Logf("%d cases set %d fields: %s", len(gt.Cases), len(paths), strings.Join(paths, ", "))
}

// leafPaths lists the dotted paths of v's non-object values.
func leafPaths(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{prefix}
	}
	var out []string
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, leafPaths(p, child)...)
	}
	return out
}
