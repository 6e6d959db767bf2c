package advisor

import (
	"fmt"
	"math"
	"strings"
)

// shape is what the plan search needs to know about an instance type;
// offers that share a shape share its search.
type shape struct {
	gpu         string
	perNode     int
	capacity    float64 // GPU memory, bytes
	link        string
	hostMem     float64 // bytes per node
	networkGbps float64
}

// candidate is the best plan found for one node count.
type candidate struct {
	plan   Plan
	mem    mem
	timing Timing
	// ckptBytes is a full checkpoint's size (model and optimizer states).
	ckptBytes float64
	// Serving: instances needed and the throughput they give.
	instances  int
	throughput float64 // output tokens/s, all replicas
	missesSLO  bool
}

// searchResult is a shape's plans, or why there are none.
type searchResult struct {
	hw    hardware
	plans []candidate // training: best per node count, ascending; serving: one
	// shortfall is the smallest (need − capacity) seen when nothing fits.
	shortfall     float64
	shortfallPlan Plan
}

// searchLimits bound the search.
type searchLimits struct {
	maxNodes int
	deadline float64 // seconds; 0 means none
}

var (
	powersOfTwo = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	recomputeFA = []Recompute{RecomputeNone, RecomputeFull}
	recomputeEA = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}
)

// searchTraining finds, for each node count, the fastest plan that fits; at
// a fixed node count and price the fastest plan is also the cheapest. The
// search, in order:
//  1. node counts 1, 2, 4, … up to maxNodes, stopping three doublings after
//     the first fit (and once the deadline is met), since more nodes only
//     add communication for the same GPU-hours;
//  2. tensor parallel degrees that divide the heads and stay inside a node
//     (an NVLink domain), pipeline degrees that divide the GPUs, data
//     parallel the rest, no more than the global batch;
//  3. for each recomputation mode, the lowest ZeRO stage that fits (stages
//     2 and 3 only without pipelining, as DeepSpeed requires), then CPU
//     offload only if nothing fits on the GPUs;
//  4. the largest micro-batch that fits (up to 8) without pipelining, 1 with
//     it (more micro-batches, a smaller bubble), unless the profile fixes it.
//
// Configurations whose least step time (leastStep) cannot beat the plan
// already found are skipped unworked; the ranking is the exhaustive
// search's (TestPruningKeepsRanking).
func (w *workload) searchTraining(sh shape, hw *hardware, lim searchLimits, memo *fitMemo) searchResult {
	res := searchResult{hw: *hw, shortfall: math.Inf(1)}
	recomputes := recomputeFA
	if w.Attention == Eager {
		recomputes = recomputeEA
	}
	firstFit := 0
	nodeCounts := powersOfTwo
	if n := w.Pin.pinnedNodes(sh.perNode); n > 0 {
		nodeCounts = []int{n}
	}
	for _, n := range nodeCounts {
		if n > lim.maxNodes || (firstFit > 0 && n > firstFit*8) {
			break
		}
		if firstFit > 0 && lim.deadline > 0 && len(res.plans) > 0 {
			last := res.plans[len(res.plans)-1]
			if last.timing.Seconds <= lim.deadline && n > last.plan.Nodes*2 {
				break
			}
		}
		if !w.Pin.nodesOK(n, sh.perNode) {
			continue
		}
		best, found := w.bestAtNodes(n, sh, hw, recomputes, &res, memo)
		if found {
			res.plans = append(res.plans, best)
			if firstFit == 0 {
				firstFit = n
			}
			// A plan that needs no memory-saving measure cannot get cheaper
			// with more nodes (same FLOPs, more communication); only a
			// deadline is a reason to keep going.
			p := best.plan
			relaxed := p.Recompute == RecomputeNone && !p.Offload && p.ZeRO < 3 && p.PP == 1
			if relaxed && (lim.deadline == 0 || best.timing.Seconds <= lim.deadline) {
				break
			}
		}
	}
	return res
}

// bestAtNodes is the fastest plan that fits exactly n nodes.
func (w *workload) bestAtNodes(n int, sh shape, hw *hardware, recomputes []Recompute, res *searchResult, memo *fitMemo) (candidate, bool) {
	G := n * sh.perNode
	var best candidate
	found := false
	pin := &w.Pin
	cp := max(1, pin.CP)

	for _, tp := range powersOfTwo {
		if tp > sh.perNode || sh.perNode%tp != 0 || w.arch.Heads%tp != 0 || (tp > 1 && w.Parallelism == "data") || (pin.TP > 0 && tp != pin.TP) {
			continue
		}
		pps := powersOfTwo
		if pin.PP > 0 {
			pps = []int{pin.PP} // a pinned depth need not be a power of two (BLOOM: 12)
		}
		for _, pp := range pps {
			if pp > w.arch.Layers || G%(tp*pp*cp) != 0 || (pp > 1 && w.Parallelism == "data") || (pin.PP > 0 && pp != pin.PP) {
				continue
			}
			dp := G / (tp * pp * cp)
			if dp > w.GlobalBatch || (pin.DP > 0 && dp != pin.DP) {
				continue
			}
			base := Plan{Nodes: n, GPUsPerNode: sh.perNode, TP: tp, PP: pp, DP: dp, CP: pin.CP, VP: vpFor(pin, pp)}
			eps := w.expertDegrees(tp, dp)
			// Prune before any memory or time is worked out: no plan here
			// beats the best so far when even its least step (leastStep;
			// with expert parallelism to come, without the data-parallel
			// term, which it lowers) is no faster. Time to finish grows
			// with step time at a fixed node count (same GPUs, same
			// checkpoint), so this skips only plans that would lose.
			dense := len(eps) == 1 && eps[0] == 0
			if found && !w.exhaustive && best.timing.StepTime <= w.leastStep(base, hw, dense, memo) {
				continue
			}
			// Expert degrees ascend: a larger one only adds all-to-all
			// traffic unless it frees memory, so stop once a plan needs no
			// memory-saving measure (stops).
			var skipped uint64 // degrees pruned by their least step, by index
			for i, ep := range eps {
				b := base
				b.EP, b.OverlapExpertComm = ep, pin.OverlapExpertComm && ep > 1
				if found && !w.exhaustive && !dense && i < 64 && best.timing.StepTime <= w.leastStep(b, hw, true, memo) {
					skipped |= 1 << i
					continue
				}
				c, ok := w.bestOptions(b, sh, hw, recomputes, res, memo)
				if ok && (!found || c.timing.Seconds < best.timing.Seconds) {
					// The search without pruning would have tried the
					// skipped degrees first, and stopped at one that
					// needs no memory-saving measure before reaching
					// this one; work them out now to know.
					if w.anyStops(base, eps, skipped, sh, hw, recomputes, res, memo) {
						break
					}
					skipped = 0
					best, found = c, true
				}
				if ok && stops(c.plan) {
					break
				}
			}
		}
	}
	if found {
		// The search kept only the totals; the row needs every term.
		best.mem = w.trainingMemory(best.plan, sh.capacity)
	}
	return best, found
}

// stops reports whether a plan needs no memory-saving measure, so that a
// larger expert-parallel degree is not tried after it.
func stops(p Plan) bool {
	return p.Recompute == RecomputeNone && p.ZeRO < 2 && !p.Offload && !p.OffloadParams
}

// anyStops reports whether one of the expert-parallel degrees eps[i] with
// bit i set in skipped has a plan that stops the search over degrees.
func (w *workload) anyStops(base Plan, eps []int, skipped uint64, sh shape, hw *hardware, recomputes []Recompute, res *searchResult, memo *fitMemo) bool {
	for i, ep := range eps {
		if skipped&(1<<i) == 0 {
			continue
		}
		b := base
		b.EP, b.OverlapExpertComm = ep, w.Pin.OverlapExpertComm && ep > 1
		if c, ok := w.bestOptions(b, sh, hw, recomputes, res, memo); ok && stops(c.plan) {
			return true
		}
	}
	return false
}

// noExpertParallelism is the one degree a dense model tries; shared, so
// that the search's hot path does not allocate it.
var noExpertParallelism = []int{0}

// expertDegrees are the expert-parallel degrees to try at tensor and
// data-parallel degrees tp and dp: the pinned one (it must divide dp, or
// tp·dp with folding), or for a fully trained MoE every power of two that
// divides both dp and the experts (0 stands for none). LoRA keeps the
// frozen experts replicated (PEFT has no expert parallelism).
func (w *workload) expertDegrees(tp, dp int) []int {
	if w.Pin.EP > 0 {
		if dp%w.Pin.EP != 0 && (tp*dp)%w.Pin.EP != 0 {
			return nil
		}
		return []int{w.Pin.EP}
	}
	if w.moeLayers() == 0 || (w.Task != PreTrain && w.Task != FullFineTune) {
		return noExpertParallelism
	}
	// w.epDegrees lists 0 and the powers of two dividing the experts;
	// those that also divide dp are a prefix of it.
	n := 1
	for n < len(w.epDegrees) && w.epDegrees[n] <= dp && dp%w.epDegrees[n] == 0 {
		n++
	}
	return w.epDegrees[:n]
}

// bestOptions picks recomputation, ZeRO stage, offload and micro-batch for
// a fixed (nodes, tp, pp, dp, cp), within the profile's pins. The
// candidate's mem is left for bestAtNodes to fill.
func (w *workload) bestOptions(base Plan, sh shape, hw *hardware, recomputes []Recompute, res *searchResult, memo *fitMemo) (candidate, bool) {
	pin := &w.Pin
	minZero, maxZero := 0, 3
	if base.PP > 1 {
		maxZero = 1
	}
	if pin.ZeRO != nil {
		minZero, maxZero = *pin.ZeRO, *pin.ZeRO
	}
	if pin.Recompute != "" {
		recomputes = []Recompute{pin.Recompute}
	}
	offloads := []bool{false, true}
	if sh.hostMem == 0 {
		offloads = offloads[:1]
	}
	if pin.OffloadOptimizer != nil {
		offloads = []bool{*pin.OffloadOptimizer}
	}
	// Parameter offload streams every weight over PCIe twice per
	// micro-batch: a last resort the search considers only when pinned, so
	// that unpinned searches prune as cheaply as before.
	paramOffloads := []bool{false}
	if pin.OffloadParams != nil {
		paramOffloads = []bool{*pin.OffloadParams}
	}
	mb := w.MicroBatch
	if mb == 0 {
		mb = 1
	}
	// stageOK: with one data-parallel rank a ZeRO stage only helps together
	// with offload (DeepSpeed runs ZeRO-Offload and ZeRO-3 offload on one
	// GPU); parameter offload needs stage 3.
	stageOK := func(z int, off, offParams bool) bool {
		if offParams && z != 3 {
			return false
		}
		if pin.ZeRO != nil {
			return true
		}
		if base.DP == 1 && z > 0 && !off && !offParams {
			return false
		}
		if off && z == 0 {
			return false // ZeRO-Offload runs on stage 1 or more
		}
		return true
	}
	// Memory only falls with full recomputation, the highest stage and
	// offload: if that does not fit, nothing here does.
	{
		p := base
		p.ZeRO, p.Recompute, p.Offload, p.MicroBatch = maxZero, recomputes[len(recomputes)-1], offloads[len(offloads)-1], mb
		p.OffloadParams = maxZero == 3 && paramOffloads[len(paramOffloads)-1]
		if !stageOK(p.ZeRO, p.Offload, p.OffloadParams) {
			p.OffloadParams = false
		}
		if need := memo.fit(w, &p, sh.capacity).total - sh.capacity; need > 0 {
			if need < res.shortfall {
				res.shortfall, res.shortfallPlan = need, p
			}
			return candidate{}, false
		}
	}
	var best candidate
	found := false
	for _, offParams := range paramOffloads {
		if offParams && found && pin.OffloadParams == nil {
			break
		}
		for _, offload := range offloads {
			if offload && found && pin.OffloadOptimizer == nil {
				break
			}
			for _, rc := range recomputes {
				// A mode that recomputes more cannot beat the plan already
				// found here when its least step (its compute plus the
				// smallest bubble) is no faster; skipping it returns what
				// trying it would.
				if found && !w.exhaustive && best.timing.StepTime <= w.leastStepAt(base, hw, rc, true, memo) {
					continue
				}
				for z := minZero; z <= maxZero; z++ {
					if !stageOK(z, offload, offParams) {
						continue
					}
					p := base
					p.ZeRO, p.Recompute, p.Offload, p.OffloadParams, p.MicroBatch = z, rc, offload, offParams, mb
					m := memo.fit(w, &p, sh.capacity)
					if need := m.total - sh.capacity; need > 0 {
						if need < res.shortfall {
							res.shortfall, res.shortfallPlan = need, p
						}
						continue
					}
					if (offload || offParams) && sh.hostMem > 0 && m.host > 0.8*sh.hostMem {
						continue
					}
					if w.MicroBatch == 0 && p.PP == 1 {
						p = w.growMicroBatch(p, sh.capacity, memo)
					}
					t := w.trainingTime(p, hw)
					if !found || t.Seconds < best.timing.Seconds {
						best, found = candidate{plan: p, timing: t, ckptBytes: w.checkpointBytes()}, true
					}
					break // a higher stage at the same mode is never faster
				}
			}
		}
	}
	return best, found
}

// leastStep is a lower bound on the step time of any plan with p's
// degrees (nodes, TP, PP, DP, CP, VP, EP), whatever its recomputation,
// ZeRO stage, offload and micro-batch within the profile's pins:
// leastStepAt without recomputation (withDP as there).
func (w *workload) leastStep(p Plan, hw *hardware, withDP bool, memo *fitMemo) float64 {
	return w.leastStepAt(p, hw, RecomputeNone, withDP, memo)
}

// leastStepAt is a lower bound on the step time of any plan with p's
// degrees and recomputation rc or more, whatever its ZeRO stage, offload
// and micro-batch. It takes trainingTime's terms at ZeRO 0, no offload and
// the smallest micro-batch (the profile's, else 1): compute and the
// pipeline bubble, tensor- and pipeline-parallel communication, none of
// which any option lowers (more tokens per micro-batch only add:
// ⌈B/(dp·mb)⌉·mb ≥ ⌈B/dp⌉), plus the larger of two exposed terms, each
// at its least:
//   - the all-to-all as trainingTime gives it there;
//   - with withDP, the data-parallel communication less the most backward
//     it can hide: 2/3 of compute below ZeRO-3 (its window shrinks with
//     more micro-batches), and with ZeRO-3 where allowed, the gathers of a
//     single micro-batch less all of compute.
//
// Each of these sums grows with compute (what it hides is at most the
// compute), so the bound at rc also bounds more recomputation; the sum of
// both exposed terms would not. Offload time is left out (≥ 0). A factor
// 1 − 10⁻⁹ keeps the bound below the sum trainingTime forms in another
// order. Expert parallelism lowers data-parallel traffic, so withDP is
// false where a larger expert degree is still to be tried.
// TestPruningKeepsRanking and TestShortcutsKeepRanking hold the search to
// the exhaustive one. memo, when not nil, lends its step-only workload.
func (w *workload) leastStepAt(p Plan, hw *hardware, rc Recompute, withDP bool, memo *fitMemo) float64 {
	tw := w
	if memo != nil && memo.perStep != nil {
		tw = memo.perStep
	}
	p.Recompute, p.ZeRO, p.Offload, p.OffloadParams, p.MicroBatch = rc, 0, false, false, max(1, w.MicroBatch)
	pin := w.Pin.ZeRO
	if pin != nil && *pin < 3 {
		p.ZeRO = *pin
	}
	t := tw.trainingTime(p, hw)
	exposed := t.EPExposed
	if withDP && p.DP > 1 {
		dpExp := math.Inf(1)
		if pin == nil || *pin < 3 {
			dpExp = math.Max(0, t.DPComm-t.Compute*2/3)
		}
		if (pin == nil && p.PP == 1) || (pin != nil && *pin >= 3) {
			q := p
			q.ZeRO = 3
			if w.MicroBatch == 0 {
				q.MicroBatch = int(math.Ceil(float64(w.GlobalBatch) / float64(p.DP))) // one micro-batch
			}
			t3 := tw.trainingTime(q, hw)
			dpExp = math.Min(dpExp, math.Max(0, t3.DPComm-t3.Compute))
		}
		exposed = math.Max(exposed, dpExp)
	}
	return (t.Compute + t.Bubble + t.TPComm + t.PPComm + exposed) * (1 - 1e-9)
}

// growMicroBatch doubles the micro-batch while it fits, up to 8 and the
// per-rank batch, then tries the per-rank batch itself: a rank whose share
// of the global batch is 3 sequences runs them as one micro-batch of 3,
// not two of 2, which would double its per-micro-batch work (ZeRO-3
// gathers, pipeline flushes) for nothing.
func (w *workload) growMicroBatch(p Plan, capacity float64, memo *fitMemo) Plan {
	limit := min(8, int(math.Ceil(float64(w.GlobalBatch)/float64(p.DP))))
	for p.MicroBatch*2 <= limit {
		q := p
		q.MicroBatch *= 2
		if memo.fit(w, &q, capacity).total > capacity {
			return p
		}
		p = q
	}
	if p.MicroBatch < limit {
		q := p
		q.MicroBatch = limit
		if memo.fit(w, &q, capacity).total <= capacity {
			return q
		}
	}
	return p
}

// pinnedNodes is the node count the pin fixes on nodes of perNode GPUs (any
// count, not only powers of two), or 0 when it fixes none or none fits.
func (p *Pin) pinnedNodes(perNode int) int {
	switch {
	case p.Nodes > 0:
		return p.Nodes
	case p.GPUs > 0 && perNode > 0 && p.GPUs%perNode == 0:
		return p.GPUs / perNode
	}
	return 0
}

// nodesOK reports whether n nodes of perNode GPUs match the pinned size.
func (p *Pin) nodesOK(n, perNode int) bool {
	if p.Nodes > 0 && n != p.Nodes {
		return false
	}
	if p.GPUs > 0 && n*perNode != p.GPUs {
		return false
	}
	if p.TP > perNode {
		return false
	}
	return true
}

// describe is the pin in one line, e.g. "gpus 8, zero 3, recompute full".
func (p *Pin) describe() string {
	var parts []string
	for _, f := range []struct {
		name string
		v    int
	}{{"gpus", p.GPUs}, {"nodes", p.Nodes}, {"tp", p.TP}, {"pp", p.PP}, {"dp", p.DP}, {"cp", p.CP}, {"ep", p.EP}} {
		if f.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f.name, f.v))
		}
	}
	if p.ZeRO != nil {
		parts = append(parts, fmt.Sprintf("zero %d", *p.ZeRO))
	}
	if p.OverlapExpertComm {
		parts = append(parts, "expert all-to-all overlapped")
	}
	if p.Recompute != "" {
		parts = append(parts, "recompute "+string(p.Recompute))
	}
	if p.OffloadOptimizer != nil {
		parts = append(parts, fmt.Sprintf("offload optimizer %v", *p.OffloadOptimizer))
	}
	if p.OffloadParams != nil {
		parts = append(parts, fmt.Sprintf("offload params %v", *p.OffloadParams))
	}
	if len(parts) == 0 {
		return "nothing pinned"
	}
	return strings.Join(parts, ", ")
}

// checkpointBytes is a full checkpoint: weights and optimizer states (what
// a restart needs), or only the adapters and their optimizer for LoRA.
func (w *workload) checkpointBytes() float64 {
	if w.Task == LoRA || w.Task == QLoRA {
		return w.adapters * (4 + adapterOptimBytes(w.Optimizer))
	}
	wb, _, ob := trainingBytes(w.Precision, w.Optimizer)
	return w.params * (wb + ob)
}

// searchServing picks the tensor parallel degree that serves the workload
// for the fewest GPU-hours per token on one instance type, and the batch
// per replica (up to the requested concurrency, within the KV cache that
// fits and the latency target).
func (w *workload) searchServing(sh shape, hw *hardware) searchResult {
	res := searchResult{hw: *hw, shortfall: math.Inf(1)}
	s := w.Serving
	var best candidate
	bestCost := math.Inf(1)
	for _, tp := range powersOfTwo {
		if tp > sh.perNode || sh.perNode%tp != 0 || w.arch.Heads%tp != 0 {
			continue
		}
		// The most sequences the KV cache holds at full context.
		empty := w.servingMemory(tp, 1, sh.capacity)
		free := sh.capacity - (empty.total() - empty.kv)
		kvSeq := w.kvPerSequence(tp)
		bMax := int(math.Min(float64(s.Concurrency), math.Floor(free/kvSeq)))
		if bMax < 1 {
			need := empty.total() - sh.capacity
			if need < res.shortfall {
				res.shortfall, res.shortfallPlan = need, Plan{Nodes: 1, GPUsPerNode: sh.perNode, TP: tp, PP: 1, Replicas: 1, Batch: 1}
			}
			continue
		}
		b := bMax
		for b > 1 && w.servingMemory(tp, b, sh.capacity).total() > sh.capacity {
			b--
		}
		t := w.servingTime(tp, b, hw)
		misses := false
		if s.TargetLatency > 0 {
			target := s.TargetLatency.D().Seconds()
			for b > 1 && t.Latency > target {
				b = max(1, b/2)
				t = w.servingTime(tp, b, hw)
			}
			misses = t.Latency > target
		}
		replicas := int(math.Ceil(float64(s.Concurrency) / float64(b)))
		if s.TargetTokensPerSecond > 0 {
			replicas = max(replicas, int(math.Ceil(s.TargetTokensPerSecond/t.TokensPerSecond)))
		}
		// Whole instances are paid for; GPUs beyond the replicas the demand
		// needs stay idle (they add no throughput the workload asks for).
		instances := int(math.Ceil(float64(replicas*tp) / float64(sh.perNode)))
		throughput := float64(replicas) * t.TokensPerSecond
		cost := float64(instances) / throughput
		if misses {
			cost *= 1e6 // any plan that meets the target wins
		}
		if cost < bestCost {
			bestCost = cost
			p := Plan{Nodes: instances, GPUsPerNode: sh.perNode, TP: tp, PP: 1, DP: replicas, Replicas: replicas, Batch: b}
			best = candidate{plan: p, mem: w.servingMemory(tp, b, sh.capacity), timing: t, instances: instances, throughput: throughput, missesSLO: misses}
		}
	}
	if !math.IsInf(bestCost, 1) {
		res.plans = []candidate{best}
	}
	return res
}

// vpFor is the pinned virtual pipeline stages when the plan has a
// pipeline, else none.
func vpFor(pin *Pin, pp int) int {
	if pp < 2 {
		return 0
	}
	return pin.VP
}
