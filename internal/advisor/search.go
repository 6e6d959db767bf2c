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
func (w *workload) searchTraining(sh shape, hw *hardware, lim searchLimits) searchResult {
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
		best, found := w.bestAtNodes(n, sh, hw, recomputes, &res)
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
func (w *workload) bestAtNodes(n int, sh shape, hw *hardware, recomputes []Recompute, res *searchResult) (candidate, bool) {
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
			// Prune before any memory or time is worked out: no plan here
			// beats the best so far when even its least step (compute
			// without recomputation plus the smallest 1F1B bubble) is no
			// faster. Time to finish grows with step time at a fixed node
			// count (same GPUs, same checkpoint), so this skips only plans
			// that would lose.
			if found && !w.exhaustive && best.timing.StepTime <= w.leastStep(Plan{Nodes: n, GPUsPerNode: sh.perNode, PP: pp, DP: dp}, hw, RecomputeNone) {
				continue
			}
			// Expert degrees ascend: a larger one only adds all-to-all
			// traffic unless it frees memory, so stop once a plan needs no
			// memory-saving measure.
			for _, ep := range w.expertDegrees(tp, dp) {
				c, ok := w.bestOptions(Plan{Nodes: n, GPUsPerNode: sh.perNode, TP: tp, PP: pp, DP: dp, CP: pin.CP, VP: vpFor(pin, pp), EP: ep, OverlapExpertComm: pin.OverlapExpertComm && ep > 1}, sh, hw, recomputes, res)
				if ok && (!found || c.timing.Seconds < best.timing.Seconds) {
					best, found = c, true
				}
				if ok && c.plan.Recompute == RecomputeNone && c.plan.ZeRO < 2 && !c.plan.Offload && !c.plan.OffloadParams {
					break
				}
			}
		}
	}
	return best, found
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
// a fixed (nodes, tp, pp, dp, cp), within the profile's pins.
func (w *workload) bestOptions(base Plan, sh shape, hw *hardware, recomputes []Recompute, res *searchResult) (candidate, bool) {
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
		m := w.trainingMemory(p, sh.capacity)
		if need := m.total() - sh.capacity; need > 0 {
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
				if found && !w.exhaustive && best.timing.StepTime <= w.leastStep(base, hw, rc) {
					continue
				}
				for z := minZero; z <= maxZero; z++ {
					if !stageOK(z, offload, offParams) {
						continue
					}
					p := base
					p.ZeRO, p.Recompute, p.Offload, p.OffloadParams, p.MicroBatch = z, rc, offload, offParams, mb
					m := w.trainingMemory(p, sh.capacity)
					if need := m.total() - sh.capacity; need > 0 {
						if need < res.shortfall {
							res.shortfall, res.shortfallPlan = need, p
						}
						continue
					}
					if (offload || offParams) && sh.hostMem > 0 && m.hostPerNode > 0.8*sh.hostMem {
						continue
					}
					if w.MicroBatch == 0 && p.PP == 1 {
						p, m = w.growMicroBatch(p, m, sh.capacity)
					}
					t := w.trainingTime(p, hw)
					if !found || t.Seconds < best.timing.Seconds {
						best, found = candidate{plan: p, mem: m, timing: t, ckptBytes: w.checkpointBytes()}, true
					}
					break // a higher stage at the same mode is never faster
				}
			}
		}
	}
	return best, found
}

// leastStep is a lower bound on the step time of any plan with p's
// degrees and recomputation rc on hardware hw: trainingTime's compute term
// plus the 1F1B bubble at the most micro-batches (micro-batch 1); the
// other terms only add to it.
func (w *workload) leastStep(p Plan, hw *hardware, rc Recompute) float64 {
	_, fpt := w.flopsPerToken(rc)
	compute := float64(w.SequenceLength) * float64(w.GlobalBatch) * fpt / (float64(p.GPUs()) * hw.peak * hw.mfu)
	if w.Task == QLoRA {
		compute *= qloraSlowdown
	}
	return compute * (1 + float64(p.PP-1)/math.Ceil(float64(w.GlobalBatch)/float64(p.DP)))
}

// growMicroBatch doubles the micro-batch while it fits, up to 8 and the
// per-rank batch, then tries the per-rank batch itself: a rank whose share
// of the global batch is 3 sequences runs them as one micro-batch of 3,
// not two of 2, which would double its per-micro-batch work (ZeRO-3
// gathers, pipeline flushes) for nothing.
func (w *workload) growMicroBatch(p Plan, m mem, capacity float64) (Plan, mem) {
	limit := min(8, int(math.Ceil(float64(w.GlobalBatch)/float64(p.DP))))
	for p.MicroBatch*2 <= limit {
		q := p
		q.MicroBatch *= 2
		qm := w.trainingMemory(q, capacity)
		if qm.total() > capacity {
			return p, m
		}
		p, m = q, qm
	}
	if p.MicroBatch < limit {
		q := p
		q.MicroBatch = limit
		if qm := w.trainingMemory(q, capacity); qm.total() <= capacity {
			return q, qm
		}
	}
	return p, m
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
