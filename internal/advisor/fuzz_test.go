package advisor

import (
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
)

// FuzzProfile feeds arbitrary profiles through validation, the memory
// models and a small ranking: nothing panics, valid profiles rank, and
// memory never shrinks with more micro-batch, sequence or serving batch.
func FuzzProfile(f *testing.F) {
	f.Add(32, 4096, 11008, 32, 8, 32000, 0, 0, 2048, 64, 1, 1e8, uint8(1), uint8(1), uint8(0))
	f.Add(80, 8192, 28672, 64, 8, 32000, 8, 2, 4096, 8, 2, 1e6, uint8(3), uint8(6), uint8(1))
	f.Add(1, 64, 0, 1, 0, 10, 0, 0, 1, 1, 0, 1.0, uint8(4), uint8(2), uint8(3))
	f.Add(0, 0, -1, 0, -3, 0, -1, 5, 0, 0, -1, -1.0, uint8(9), uint8(9), uint8(9))
	tasks := []Task{PreTrain, FullFineTune, LoRA, QLoRA, Serving, "bogus"}
	precs := []Precision{FP32, BF16, FP16, FP8, INT8, INT4, NF4, "fp7"}
	offers := fuzzOffers(f)
	acc := testCatalog(f).Accelerator
	f.Fuzz(func(t *testing.T, layers, hidden, ffn, heads, kv, vocab, experts, active, seq, batch, micro int, tokens float64, task, prec, attn uint8) {
		p := Profile{
			Model:          Model{Layers: layers, Hidden: hidden, FFN: ffn, Heads: heads, KVHeads: kv, Vocab: vocab, Experts: experts, ActiveExperts: active},
			Task:           tasks[int(task)%len(tasks)],
			Precision:      precs[int(prec)%len(precs)],
			Attention:      []Attention{Flash, Eager, ""}[int(attn)%3],
			SequenceLength: seq, GlobalBatch: batch, MicroBatch: micro, Tokens: tokens,
			Serving: ServingSpec{InputTokens: seq, OutputTokens: batch, Concurrency: micro},
		}
		w, fe := resolve(p)
		res, err := Rank(p, Options{Offers: offers, Accelerator: acc, MaxNodes: 4})
		if (fe == nil) != (err == nil) {
			t.Fatalf("Validate and Rank disagree: %v vs %v", fe, err)
		}
		if fe != nil {
			if _, ok := err.(model.FieldErrors); !ok {
				t.Fatalf("error %T, want model.FieldErrors", err)
			}
			return
		}
		for _, r := range res.Rows {
			if !(r.Cost >= 0) || !(r.Hours >= 0) || r.GPUs <= 0 {
				t.Fatalf("bad row %+v", r)
			}
		}
		capacity := 80 * gib
		if p.Task.Training() {
			base := Plan{Nodes: 1, GPUsPerNode: 8, TP: 1, PP: 1, DP: 8, MicroBatch: 1}
			for _, z := range []int{0, 3} {
				for _, rc := range []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull} {
					a, b := base, base
					a.ZeRO, b.ZeRO, a.Recompute, b.Recompute = z, z, rc, rc
					b.MicroBatch = 2
					if ma, mb := w.trainingMemory(a, capacity).total(), w.trainingMemory(b, capacity).total(); mb < ma {
						t.Fatalf("memory fell with micro-batch: %.0f → %.0f", ma, mb)
					}
					longer := w
					longer.SequenceLength *= 2
					if ma, ml := w.trainingMemory(a, capacity).total(), longer.trainingMemory(a, capacity).total(); ml < ma {
						t.Fatalf("memory fell with sequence: %.0f → %.0f", ma, ml)
					}
				}
			}
		} else {
			for _, tp := range []int{1, 2} {
				if m1, m2 := w.servingMemory(tp, 1, capacity).total(), w.servingMemory(tp, 2, capacity).total(); m2 < m1 {
					t.Fatalf("serving memory fell with batch: %.0f → %.0f", m1, m2)
				}
			}
		}
	})
}

// fuzzOffers is a small, varied slice of the catalog.
func fuzzOffers(t testing.TB) []model.Offer {
	var out []model.Offer
	seen := map[string]bool{}
	for _, o := range testCatalog(t).Offers() {
		k := o.GPU + string(o.CapacityType) + o.Interconnect
		if !seen[k] {
			seen[k] = true
			out = append(out, o)
		}
	}
	return out
}
