package advisor

import "sync"

// fitMemo remembers, within one ranking, what the plan search needs of a
// training plan's memory: its total per GPU and its host memory per node.
// Training memory depends on the workload and the plan only, not on the
// GPU (trainingMemory does not read the capacity it is given:
// TestTrainingMemoryIgnoresCapacity), and every shape with the same GPUs
// per node tries largely the same plans, so a ranking asks for each plan's
// memory about ten times; the memo works most out once per search worker.
//
// It is a two-way set-associative table (a hash of the plan's key picks a
// pair of slots; a new plan replaces one), so a lookup is a multiply and
// a compare or two rather than a map access, which cost as much as the
// formula.
// A slot counts only when it holds this ranking's generation, so a table
// taken from the pool needs no clearing. A nil *fitMemo remembers
// nothing. Not safe for concurrent use: each worker has its own.
type fitMemo struct {
	gen   uint32
	slots []fitSlot
	// perStep is the ranking's workload with no steps to take, for
	// leastStepAt: trainingTime's per-step terms do not depend on the
	// steps, and with none it skips the goodput model (a square root and
	// several divisions per call).
	perStep *workload
}

type fitSlot struct {
	key uint64
	gen uint32
	fit memFit
}

// memFit is what the search reads of a plan's memory.
type memFit struct {
	total, host float64
}

// fitMemoBits sizes the table: 2^14 slots of 32 bytes (512 KiB), more than
// the ~13,000 distinct plans of DeepSeek-V3's whole-catalog search.
const fitMemoBits = 14

var fitMemos = sync.Pool{New: func() any { return &fitMemo{slots: make([]fitSlot, 1<<fitMemoBits)} }}

// getFitMemo takes a table from the pool for one ranking's worker, with
// perStep for leastStepAt; putFitMemo returns it.
func getFitMemo(perStep *workload) *fitMemo {
	f := fitMemos.Get().(*fitMemo)
	f.perStep = perStep
	f.gen++
	if f.gen == 0 { // wrapped: slots of an old generation could match
		clear(f.slots)
		f.gen = 1
	}
	return f
}

func putFitMemo(f *fitMemo) {
	if f != nil {
		f.perStep = nil
		fitMemos.Put(f)
	}
}

// fit is trainingMemory's total and host memory for p.
func (f *fitMemo) fit(w *workload, p *Plan, capacity float64) memFit {
	if f == nil {
		return fitOf(w.trainingMemory(*p, capacity))
	}
	k, ok := fitKey(p)
	if !ok {
		return fitOf(w.trainingMemory(*p, capacity))
	}
	// Two ways: the hashed slot and its neighbour, which share a cache
	// line; a new plan takes the neighbour when the slot is in use.
	i := (k * 0x9E3779B97F4A7C15) >> (64 - fitMemoBits)
	s, t := &f.slots[i], &f.slots[i^1]
	if s.gen == f.gen && s.key == k {
		return s.fit
	}
	if t.gen == f.gen && t.key == k {
		return t.fit
	}
	v := fitOf(w.trainingMemory(*p, capacity))
	if s.gen == f.gen {
		s = t
	}
	*s = fitSlot{key: k, gen: f.gen, fit: v}
	return v
}

func fitOf(m mem) memFit { return memFit{total: m.total(), host: m.hostPerNode} }

// fitKey packs the plan fields the search varies into one word: nodes,
// GPUs per node, TP, PP, EP, micro-batch, ZeRO stage, recomputation and
// the two offloads. Within one ranking the rest are functions of these
// (DP = GPUs/(TP·PP·CP), with CP, VP and overlap fixed by the profile's
// pins; bestAtNodes builds every plan so). ok is false for a plan whose
// fields do not fit the bits, which is then worked out unremembered.
func fitKey(p *Plan) (uint64, bool) {
	rc := uint64(0)
	switch p.Recompute {
	case RecomputeNone:
	case RecomputeSelective:
		rc = 1
	case RecomputeFull:
		rc = 2
	default:
		return 0, false
	}
	if uint(p.Nodes) >= 1<<16 || uint(p.GPUsPerNode) >= 1<<8 || uint(p.TP) >= 1<<8 || uint(p.PP) >= 1<<8 ||
		uint(p.EP) >= 1<<10 || uint(p.MicroBatch) >= 1<<8 || uint(p.ZeRO) > 3 {
		return 0, false
	}
	k := uint64(p.Nodes) | uint64(p.GPUsPerNode)<<16 | uint64(p.TP)<<24 | uint64(p.PP)<<32 |
		uint64(p.EP)<<40 | uint64(p.MicroBatch)<<50 | uint64(p.ZeRO)<<58 | rc<<60
	if p.Offload {
		k |= 1 << 62
	}
	if p.OffloadParams {
		k |= 1 << 63
	}
	return k, true
}
