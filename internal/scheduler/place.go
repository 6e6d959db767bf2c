package scheduler

import (
	"fmt"
	"math"
	"math/bits"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// feasibility is which classes can ever host a job of one sigKey, with the
// reasons the others cannot; pref scores the feasible ones by the job's
// ordered model preference.
type feasibility struct {
	classes []int32
	pref    []float64
	// shareOf is the GPU fraction a shared job takes on each feasible class
	// (its share, or more when its minMemory asks for a bigger slice).
	shareOf []float64
	reasons []Reason
	// key is the fitKey the result is for; offers, once candidates asked,
	// the offers such a job may run on.
	key    fitKey
	offers *offerFit
}

func (s *sched) feasible(pj *pjob) *feasibility {
	// Runs of jobs of one shape are the common case; comparing with the
	// last key is cheaper than hashing it, and comparing the memory's
	// interned key (Memory) cheaper still.
	if pj.key != nil && pj.key == s.lastKey && s.lastFeas != nil {
		return s.lastFeas
	}
	key := fitKeyOf(pj)
	if s.lastFeas != nil && key == s.lastFit {
		s.lastKey = pj.key
		return s.lastFeas
	}
	if f, ok := s.feas[key]; ok {
		s.lastFit, s.lastFeas, s.lastKey = key, f, pj.key
		return f
	}
	defer func() { s.lastFit, s.lastFeas, s.lastKey = key, s.feas[key], pj.key }()
	f := &feasibility{key: key}
	r := key.req()
	why := map[Reason][]int32{}
	for _, cl := range s.c.classes {
		if code, msg := staticFit(r, cl); code != "" {
			k := Reason{Code: code, Message: msg}
			why[k] = append(why[k], int32(cl.idx))
			continue
		}
		f.classes = append(f.classes, int32(cl.idx))
		share := 0.0
		if r.share > 0 {
			share = r.shareOn(cl)
		}
		f.shareOf = append(f.shareOf, share)
		pref := 100.0
		if n := len(r.models); n > 1 {
			for i, m := range r.models {
				if strings.EqualFold(m, cl.gpuModel) {
					pref = 100 * float64(n-i) / float64(n)
					break
				}
			}
		}
		f.pref = append(f.pref, pref)
	}
	f.reasons = s.classReasons(why)
	s.feas[key] = f
	return f
}

// scopeOf names a class in verdicts: the node itself when it is alone,
// else the group's shape and size.
func (s *sched) scopeOf(cl *class) string {
	if len(cl.nodes) == 1 {
		return "node/" + cl.first.ID
	}
	return fmt.Sprintf("nodes(%d) %s/%s %dx%s", len(cl.nodes), cl.first.Provider, cl.first.Region, cl.size, cl.gpuModel)
}

func (s *sched) classReasons(why map[Reason][]int32) []Reason {
	var out []Reason
	for r, cls := range why {
		for _, ci := range cls {
			out = append(out, Reason{Scope: s.scopeOf(s.c.classes[ci]), Code: r.Code, Message: r.Message})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].Message < out[j].Message
	})
	if len(out) > maxReasons {
		rest := len(out) - maxReasons
		out = append(out[:maxReasons:maxReasons], Reason{Scope: "nodes", Message: fmt.Sprintf("%d more node groups do not fit", rest)})
	}
	return out
}

// maxReasons bounds the reasons listed per job.
const maxReasons = 20

// Score weights (a fixed 0–100 scale; see scoreNode).
const (
	weightFit   = 3
	weightPrice = 3
	weightPref  = 2
	weightTopo  = 2
)

// scoreNode rates one node for one replica on a fixed 0–100 scale:
//   - fit (fragmentation): 100·want/free — a node whose free GPUs the
//     replica fills exactly scores 100, an empty 8-GPU node scores 12.5 for
//     one GPU, so partly used nodes fill before empty ones are opened and
//     whole nodes stay free for big gangs;
//   - price: 100·cheapest/this per GPU-hour among the job's feasible
//     classes, so the cheapest GPU-hour wins between equal fits;
//   - preference: the job's ordered GPU model list, first model 100;
//   - topology: 100 when the replica's GPUs share one NVLink domain.
func scoreNode(want, free int, gpuPrice, cheapest, pref float64, oneGroup bool) float64 {
	fit := 100 * float64(want) / float64(max(free, 1))
	price := 100.0
	if gpuPrice > 0 {
		price = 100 * cheapest / gpuPrice
	}
	topo := 0.0
	if oneGroup {
		topo = 100
	}
	return (weightFit*fit + weightPrice*price + weightPref*pref + weightTopo*topo) / (weightFit + weightPrice + weightPref + weightTopo)
}

// scanLimit bounds how many nodes of one bucket are tried when CPU, memory
// or a strict topology rule rejects them.
const scanLimit = 64

// bestInClass finds the best-fitting node of cl for one replica: the
// smallest free count that holds it.
func (s *sched) bestInClass(pj *pjob, cl *class) (node int32, mask uint64, free int, oneGroup, ok bool) {
	res := &pj.job.Spec.Resources
	strict := res.GPU.Interconnect == "nvlink" || res.GPU.Interconnect == "nvswitch"
	for k := pj.g; k <= cl.size; k++ {
		b := cl.buckets[k]
		tried := 0
		// From the front: with swap-removal the lowest node ids go first
		// on a fresh cluster, which keeps plans readable.
		for p := 0; p < len(b) && tried < scanLimit; p++ {
			tried++
			if tried == scanLimit {
				s.unsettled = true // a bounded scan need not be monotone: see settled
			}
			ni := b[p]
			ns := &s.c.nodes[ni]
			if ns.cpu < res.CPU || ns.mem < res.Memory {
				continue
			}
			m, one, fits := cl.pickGPUs(ns.free, pj.g, strict)
			if !fits {
				continue
			}
			return ni, m, k, one, true
		}
	}
	return 0, 0, 0, false, false
}

// undoEntry restores one node's free state.
type undoEntry struct {
	node  int32
	free  uint64
	cpu   float64
	mem   model.Bytes
	share int     // shared GPU position, or -1
	frac  float64 // its previous held fraction
}

func (s *sched) take(ni int32, mask uint64, cpu float64, mem model.Bytes) {
	ns := &s.c.nodes[ni]
	s.undo = append(s.undo, undoEntry{node: ni, free: ns.free, cpu: ns.cpu, mem: ns.mem, share: -1})
	ns.cpu -= cpu
	ns.mem -= mem
	s.c.setFree(ni, ns.free&^mask)
}

func (s *sched) rollback(to int) {
	for i := len(s.undo) - 1; i >= to; i-- {
		u := s.undo[i]
		ns := &s.c.nodes[u.node]
		ns.cpu, ns.mem = u.cpu, u.mem
		if u.share >= 0 {
			s.c.shared[u.node][u.share] = u.frac
		}
		s.c.setFree(u.node, u.free)
	}
	s.undo = s.undo[:to]
}

// placement is a job's tentative placement: committed to the working
// cluster (and undoable from mark) but not yet to the plan.
type placement struct {
	replicas []Placement
	gpuModel string
	mark     int
}

// place puts every replica of pj on the working cluster, or none. It does
// not check quota for the model chosen when admitModel says no; the
// returned reasons explain a failure by node group.
func (s *sched) place(pj *pjob, f *feasibility) (*placement, []Reason) {
	spec := &pj.job.Spec
	switch {
	case pj.share > 0:
		return s.placeShared(pj, f)
	case pj.g == 0:
		return s.placeCPU(pj, f)
	case spec.Replicas == 1:
		return s.placeOne(pj, f)
	}
	return s.placeGang(pj, f)
}

func (s *sched) placeOne(pj *pjob, f *feasibility) (*placement, []Reason) {
	res := &pj.job.Spec.Resources
	cheapest := math.Inf(1)
	for _, ci := range f.classes {
		cheapest = min(cheapest, s.c.classes[ci].gpuPrice)
	}
	var (
		best      float64 = -1
		bestNode  int32
		bestMask  uint64
		bestClass *class
		quotaWhy  []Reason
	)
	for i, ci := range f.classes {
		cl := s.c.classes[ci]
		if cl.freeTotal < pj.g {
			continue
		}
		if why, ok := s.admit(pj, cl.gpuModel, float64(pj.g)); !ok {
			quotaWhy = appendReason(quotaWhy, why)
			continue
		}
		ni, mask, free, one, ok := s.bestInClass(pj, cl)
		if !ok {
			continue
		}
		sc := 100.0
		if len(f.classes) > 1 {
			sc = scoreNode(pj.g, free, cl.gpuPrice, cheapest, f.pref[i], one || cl.size == 1)
			if len(pj.data) > 0 {
				sc = withData(sc, dataScore(pj.data, cl.data))
			}
		}
		if sc > best {
			best, bestNode, bestMask, bestClass = sc, ni, mask, cl
			if len(f.classes) == 1 {
				break
			}
		}
	}
	if bestClass == nil {
		return nil, s.capacityReasons(pj, f, quotaWhy)
	}
	p := &placement{gpuModel: bestClass.gpuModel, mark: len(s.undo)}
	s.take(bestNode, bestMask, res.CPU, res.Memory)
	p.replicas = []Placement{{Rank: 0, NodeID: s.c.node(bestNode).ID, GPUs: indexes(bestMask)}}
	return p, nil
}

// placeGang places replicas × GPUs all or nothing inside one domain
// (provider, region, placement group) and one GPU model: the domain whose
// classes score best by preference and price and can hold every replica.
// Several replicas may share a node when it has room for them.
func (s *sched) placeGang(pj *pjob, f *feasibility) (*placement, []Reason) {
	spec := &pj.job.Spec
	type group struct {
		domain  int
		model   string
		classes []int
		score   float64
	}
	var groups []*group
	byKey := map[[2]string]*group{}
	cheapest := math.Inf(1)
	for _, ci := range f.classes {
		cheapest = min(cheapest, s.c.classes[ci].gpuPrice)
	}
	for i, ci := range f.classes {
		cl := s.c.classes[ci]
		k := [2]string{s.c.domains[cl.domain], cl.gpuModel}
		g := byKey[k]
		if g == nil {
			g = &group{domain: cl.domain, model: cl.gpuModel, score: -1}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.classes = append(g.classes, i)
		price := 100.0
		if cl.gpuPrice > 0 {
			price = 100 * cheapest / cl.gpuPrice
		}
		g.score = max(g.score, (weightPrice*price+weightPref*f.pref[i])/(weightPrice+weightPref))
	}
	sort.SliceStable(groups, func(a, b int) bool { return groups[a].score > groups[b].score })
	total := float64(pj.g * spec.Replicas)
	var quotaWhy []Reason
	bestPartial := 0
	for _, g := range groups {
		free := 0
		for _, i := range g.classes {
			free += s.c.classes[f.classes[i]].freeTotal
		}
		if free < pj.g*spec.Replicas {
			fit := 0
			for _, i := range g.classes {
				cl := s.c.classes[f.classes[i]]
				for k := pj.g; k <= cl.size; k++ {
					fit += len(cl.buckets[k]) * (k / pj.g)
				}
			}
			bestPartial = max(bestPartial, min(fit, spec.Replicas-1))
			continue
		}
		if why, ok := s.admit(pj, g.model, total); !ok {
			quotaWhy = appendReason(quotaWhy, why)
			continue
		}
		p := &placement{gpuModel: g.model, mark: len(s.undo)}
		for rank := 0; rank < spec.Replicas; rank++ {
			var (
				bestNode int32
				bestMask uint64
				bestFree = maxNodeGPUs + 1
				bestData = -1.0
				found    bool
			)
			for _, i := range g.classes {
				cl := s.c.classes[f.classes[i]]
				ni, mask, free, _, ok := s.bestInClass(pj, cl)
				// Nodes holding more of the job's data first, then
				// the best fit.
				if d := dataScore(pj.data, cl.data); ok && (d > bestData || d == bestData && free < bestFree) {
					bestNode, bestMask, bestFree, bestData, found = ni, mask, free, d, true
				}
			}
			if !found {
				bestPartial = max(bestPartial, rank)
				break
			}
			s.take(bestNode, bestMask, spec.Resources.CPU, spec.Resources.Memory)
			p.replicas = append(p.replicas, Placement{Rank: rank, NodeID: s.c.node(bestNode).ID, GPUs: indexes(bestMask)})
		}
		if len(p.replicas) == spec.Replicas {
			return p, nil
		}
		s.rollback(p.mark)
	}
	reasons := s.capacityReasons(pj, f, quotaWhy)
	if bestPartial > 0 {
		reasons = append([]Reason{{Scope: "job", Message: fmt.Sprintf("only %d of %d replicas fit at once in one provider, region and placement group; replicas start together or not at all", bestPartial, spec.Replicas)}}, reasons...)
	}
	return nil, reasons
}

// placeCPU places replicas that need no GPU, preferring nodes without GPUs
// so GPU nodes stay whole.
func (s *sched) placeCPU(pj *pjob, f *feasibility) (*placement, []Reason) {
	res := &pj.job.Spec.Resources
	order := append([]int32(nil), f.classes...)
	sort.SliceStable(order, func(a, b int) bool {
		x, y := s.c.classes[order[a]], s.c.classes[order[b]]
		if dx, dy := dataScore(pj.data, x.data), dataScore(pj.data, y.data); dx != dy {
			return dx > dy // nodes holding the job's data first
		}
		return x.size < y.size
	})
	p := &placement{mark: len(s.undo)}
	for rank := 0; rank < pj.job.Spec.Replicas; rank++ {
		placed := false
		for _, ci := range order {
			for _, ni := range s.c.classes[ci].nodes {
				ns := &s.c.nodes[ni]
				if ns.cpu >= res.CPU && ns.mem >= res.Memory {
					s.take(ni, 0, res.CPU, res.Memory)
					p.replicas = append(p.replicas, Placement{Rank: rank, NodeID: s.c.node(ni).ID})
					placed = true
					break
				}
			}
			if placed {
				break
			}
		}
		if !placed {
			s.rollback(p.mark)
			r := append([]Reason(nil), f.reasons...)
			return nil, append(r, Reason{Scope: "job", Message: fmt.Sprintf("no ready node has %.1f CPUs and %s memory free", res.CPU, res.Memory)})
		}
	}
	return p, nil
}

// placeShared packs fractional replicas onto shareable GPUs: the most
// used GPU that still has room (best fit), never beyond a whole GPU — and
// so never beyond its memory.
func (s *sched) placeShared(pj *pjob, f *feasibility) (*placement, []Reason) {
	res := &pj.job.Spec.Resources
	p := &placement{mark: len(s.undo)}
	var quotaWhy []Reason
	for rank := 0; rank < pj.job.Spec.Replicas; rank++ {
		var (
			bestNode  int32 = -1
			bestGPU   int
			bestUsed  = -1.0
			bestShare float64
		)
		for i, ci := range f.classes {
			cl := s.c.classes[ci]
			share := f.shareOf[i]
			if why, ok := s.admit(pj, cl.gpuModel, share*float64(pj.job.Spec.Replicas)); !ok {
				quotaWhy = appendReason(quotaWhy, why)
				continue
			}
			for _, ni := range cl.nodes {
				ns := &s.c.nodes[ni]
				if ns.cpu < res.CPU || ns.mem < res.Memory {
					continue
				}
				for g := 0; g < cl.size; g++ {
					used := 1.0
					switch {
					case ns.free&(1<<uint(g)) != 0:
						used = 0
					case s.c.shared[ni] != nil && s.c.shared[ni][g] > 0:
						used = s.c.shared[ni][g]
					}
					if used+share <= 1+eps && used > bestUsed {
						bestNode, bestGPU, bestUsed, bestShare = ni, g, used, share
						p.gpuModel = cl.gpuModel
					}
				}
			}
		}
		if bestNode < 0 {
			s.rollback(p.mark)
			return nil, s.capacityReasons(pj, f, quotaWhy)
		}
		ns := &s.c.nodes[bestNode]
		if s.c.shared == nil {
			s.c.shared = map[int32][]float64{}
		}
		sh := s.c.shared[bestNode]
		if sh == nil {
			sh = make([]float64, s.c.classes[ns.cls].size)
			s.c.shared[bestNode] = sh
		}
		s.undo = append(s.undo, undoEntry{node: bestNode, free: ns.free, cpu: ns.cpu, mem: ns.mem, share: bestGPU, frac: sh[bestGPU]})
		sh[bestGPU] += bestShare
		ns.cpu -= res.CPU
		ns.mem -= res.Memory
		s.c.setFree(bestNode, ns.free&^(1<<uint(bestGPU)))
		p.replicas = append(p.replicas, Placement{Rank: rank, NodeID: s.c.node(bestNode).ID, GPUs: []int{bestGPU}, Share: bestShare})
	}
	return p, nil
}

func appendReason(rs []Reason, r Reason) []Reason {
	for _, x := range rs {
		if x == r {
			return rs
		}
	}
	return append(rs, r)
}

// capacityReasons explains why no feasible class had room now, after the
// static reasons of the infeasible ones.
//
// The answer depends on the job only through its feasibility, queue and
// project, and on the cluster only through what is free, so it is kept
// per (feasibility, queue, project) while nothing is taken or freed: a
// deep queue of blocked jobs of one shape shares one slice (clipped, so
// a verdict that adds reasons copies it), instead of building one per
// job with room reserved for every class.
func (s *sched) capacityReasons(pj *pjob, f *feasibility, quota []Reason) []Reason {
	key := capKey{f, pj.q, pj.proj}
	if e, ok := s.capCache[key]; ok && e.gen == s.c.gen {
		return e.reasons
	}
	out := slices.Clip(s.buildCapacityReasons(pj, f, quota))
	if s.capCache == nil {
		s.capCache = map[capKey]capEntry{}
	}
	s.capCache[key] = capEntry{gen: s.c.gen, reasons: out}
	return out
}

type capKey struct {
	f    *feasibility
	q    *queueState
	proj *projectState
}

type capEntry struct {
	gen     uint64
	reasons []Reason
}

func (s *sched) buildCapacityReasons(pj *pjob, f *feasibility, quota []Reason) []Reason {
	out := make([]Reason, 0, min(len(f.reasons)+len(quota)+len(f.classes), maxReasons+4))
	out = append(out, quota...)
	out = append(out, f.reasons...)
	res := &pj.job.Spec.Resources
	for _, ci := range f.classes {
		if len(out) >= maxReasons {
			break
		}
		cl := s.c.classes[ci]
		most := 0
		for k := cl.size; k > 0; k-- {
			if len(cl.buckets[k]) > 0 {
				most = k
				break
			}
		}
		var msg string
		switch {
		case pj.share > 0:
			msg = fmt.Sprintf("no shared GPU has %.2f of its capacity free", pj.share)
		case pj.g == 0:
			continue
		case most >= pj.g && pj.job.Spec.Replicas > 1:
			continue // the gang-level reason says how many replicas fit
		case most >= pj.g:
			if _, ok := s.admit(pj, cl.gpuModel, float64(pj.g)); !ok {
				continue // the quota reason says it
			}
			out = append(out, s.whyNoNode(pj, cl, res)...)
			continue
		case len(cl.nodes) == 1:
			msg = fmt.Sprintf("%d matching GPUs free, job needs %d", most, pj.g)
		default:
			msg = fmt.Sprintf("at most %d matching GPUs free on one node, job needs %d per replica", most, pj.g)
		}
		out = append(out, Reason{Scope: s.scopeOf(cl), Code: ReasonGPUsFree, Message: msg})
	}
	return out
}

// Reason codes of what is short on nodes that have enough GPUs free.
const (
	ReasonGPUsFree   = "gpus-free"
	ReasonCPUFree    = "cpu-free"
	ReasonMemoryFree = "memory-free"
	ReasonNVLinkFree = "nvlink-free"
)

// whyNoNode says, for a class with nodes of enough free GPUs where no
// replica of pj fits, what is short on them: CPU, memory, or GPUs free
// inside one NVLink domain — each with the most a node has, so the user
// sees which to ask less of. It looks at the nodes bestInClass looks at.
func (s *sched) whyNoNode(pj *pjob, cl *class, res *model.Resources) []Reason {
	strict := res.GPU.Interconnect == "nvlink" || res.GPU.Interconnect == "nvswitch"
	var (
		cpuShort, memShort, nvShort int
		bestCPU                     float64
		bestMem                     model.Bytes
		bestDomain                  int
	)
	for k := pj.g; k <= cl.size; k++ {
		b := cl.buckets[k]
		for p := 0; p < len(b) && p < scanLimit; p++ {
			ns := &s.c.nodes[b[p]]
			if ns.cpu < res.CPU {
				cpuShort++
				bestCPU = max(bestCPU, ns.cpu)
			}
			if ns.mem < res.Memory {
				memShort++
				bestMem = max(bestMem, ns.mem)
			}
			if _, _, ok := cl.pickGPUs(ns.free, pj.g, strict); !ok {
				nvShort++
				for _, g := range cl.groups {
					bestDomain = max(bestDomain, bits.OnesCount64(ns.free&g))
				}
			}
		}
	}
	scope := s.scopeOf(cl)
	var out []Reason
	if cpuShort > 0 {
		out = append(out, Reason{Scope: scope, Code: ReasonCPUFree, Message: fmt.Sprintf("nodes with enough GPUs free have at most %.1f CPUs free, job needs %.1f per replica", bestCPU, res.CPU)})
	}
	if memShort > 0 {
		out = append(out, Reason{Scope: scope, Code: ReasonMemoryFree, Message: fmt.Sprintf("nodes with enough GPUs free have at most %s memory free, job needs %s per replica", bestMem, res.Memory)})
	}
	if nvShort > 0 {
		out = append(out, Reason{Scope: scope, Code: ReasonNVLinkFree, Message: fmt.Sprintf("at most %d GPUs are free inside one NVLink domain of a node, job needs %d over %s", bestDomain, pj.g, res.GPU.Interconnect)})
	}
	if len(out) == 0 {
		out = append(out, Reason{Scope: scope, Code: ReasonGPUsFree, Message: fmt.Sprintf("more than %d nodes with %d GPUs free were tried; none fits", scanLimit, pj.g)})
	}
	return out
}

func modelAllowed(models []string, m string) bool {
	if len(models) == 0 {
		return true
	}
	for _, want := range models {
		if strings.EqualFold(want, m) {
			return true
		}
	}
	return false
}

func regionAllowed(p model.RegionPolicy, region string) bool {
	for _, pat := range p.Deny {
		if ok, _ := path.Match(pat, region); ok {
			return false
		}
	}
	if len(p.Allow) == 0 {
		return true
	}
	for _, pat := range p.Allow {
		if ok, _ := path.Match(pat, region); ok {
			return true
		}
	}
	return false
}
