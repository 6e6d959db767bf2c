package scheduler

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/cuda"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// fitKey is everything about a job that decides which node classes can
// ever host it (the node filters below) and which offers can (rankOffers).
// Jobs with equal keys share one feasibility result per pass, so the
// filters read the key and nothing else: a filter that needs another fact
// of the job must first add it here, and one job's verdict can never
// become another's (issue #14, item 2).
type fitKey struct {
	g, replicas int
	share       float64
	// spot is the job's effective spot policy; specSpot what it asked
	// for (the two differ once it falls back to on-demand, which the
	// verdict says).
	spot, specSpot model.SpotPolicy
	cpu            float64
	mem            model.Bytes
	ic             string
	minMem         model.Bytes
	maxPrice       float64
	// deadline is set for a job whose spot capacity the deadline rule
	// weighs (deadlineOf); zero for every other job, so that they share.
	deadline deadlineReq
	// image is set for a job with run.image (it needs a container
	// runtime); trusted for one an admin submitted (it may run on a node
	// that does not isolate workloads).
	image, trusted bool
	// cuda is the CUDA version the job's image needs (run.cuda).
	cuda string
	// models, allow and deny are lists joined by NUL; selector is the
	// sorted key=value pairs of spec.nodeSelector joined by NUL.
	models, allow, deny, selector string
}

func joinList(l []string) string {
	switch len(l) {
	case 0:
		return ""
	case 1:
		return l[0]
	}
	return strings.Join(l, "\x00")
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

func fitKeyOf(pj *pjob) fitKey {
	if pj.key != nil {
		return *pj.key
	}
	sp := &pj.job.Spec
	k := fitKey{g: pj.g, replicas: sp.Replicas, share: pj.share, spot: pj.spot, specSpot: sp.Spot,
		cpu: sp.Resources.CPU, mem: sp.Resources.Memory, ic: sp.Resources.GPU.Interconnect,
		minMem: sp.Resources.GPU.MinMemory, maxPrice: sp.MaxPricePerHour,
		image: sp.Run.Image != "", trusted: pj.job.Trusted, cuda: sp.Run.CUDA, deadline: pj.deadline,
		models: joinList(sp.Resources.GPU.Models), allow: joinList(sp.Regions.Allow), deny: joinList(sp.Regions.Deny)}
	if len(sp.NodeSelector) > 0 {
		keys := make([]string, 0, len(sp.NodeSelector))
		for key, v := range sp.NodeSelector {
			keys = append(keys, key+"\x01"+v)
		}
		sort.Strings(keys)
		k.selector = strings.Join(keys, "\x00")
	}
	return k
}

// fitReq is a fitKey unpacked once per key for the filters.
type fitReq struct {
	fitKey
	models   []string
	regions  model.RegionPolicy
	selector [][2]string
	strictIC bool // nvlink or nvswitch
}

func (k fitKey) req() *fitReq {
	r := &fitReq{fitKey: k, models: splitList(k.models),
		regions:  model.RegionPolicy{Allow: splitList(k.allow), Deny: splitList(k.deny)},
		strictIC: k.ic == "nvlink" || k.ic == "nvswitch"}
	for _, kv := range splitList(k.selector) {
		key, v, _ := strings.Cut(kv, "\x01")
		r.selector = append(r.selector, [2]string{key, v})
	}
	return r
}

// wantsGPU is false for a job that needs no GPU at all.
func (r *fitReq) wantsGPU() bool { return r.g > 0 || r.share > 0 }

// shareOn is the fraction of one GPU a shared replica takes on cl: its
// share, or more when its minMemory asks for a bigger slice.
func (r *fitReq) shareOn(cl *class) float64 {
	share := r.share
	if r.minMem > 0 && cl.gpuMem > 0 {
		share = max(share, float64(r.minMem)/float64(cl.gpuMem))
	}
	return share
}

// Filter codes: the reason a node class can never host a job, as data
// (Reason.Code), so tests and tools match codes rather than messages.
const (
	FilterNotReady     = "node-not-ready"
	FilterCapacityType = "capacity-type"
	FilterDeadline     = "deadline-risk"
	FilterRegion       = "region"
	FilterNodeSelector = "node-selector"
	FilterRuntime      = "container-runtime"
	FilterIsolation    = "isolation"
	FilterCUDA         = "cuda"
	FilterCPU          = "cpu"
	FilterMemory       = "memory"
	FilterNoGPUs       = "no-gpus"
	FilterGPUModel     = "gpu-model"
	FilterGPUMemory    = "gpu-memory"
	FilterSharing      = "gpu-sharing"
	FilterGPUCount     = "gpu-count"
	FilterInterconnect = "interconnect"
	FilterPrice        = "price"
)

// filter is one static check of a node class against a job's fitKey: it
// returns "" when the class passes, else why not. Static means it depends
// on the class's shape and the key only, never on what is free now, so
// its result is cached per key for the pass.
type filter struct {
	code string
	// gpu filters apply only to jobs that need a GPU (or a share of one).
	gpu   bool
	check func(r *fitReq, cl *class) string
}

// filters is the node filter pipeline, in order; the first that fails
// names the class's reason. Cheap, common rejections come first; each
// line says why it sits where it does. To add a filter, add its inputs to
// fitKey, a code above and a line here.
var filters = [...]filter{
	// A launching, draining or lost node hosts nothing new.
	{FilterNotReady, false, func(r *fitReq, cl *class) string {
		if !cl.ready {
			return fmt.Sprintf("node is %s", cl.first.State)
		}
		return ""
	}},
	// Policy before shape: a spot or region mismatch is what a user
	// changes first.
	{FilterCapacityType, false, filterCapacityType},
	// A spot node too likely to be interrupted for the job to finish by
	// its deadline (deadline.go); on-demand nodes are not weighed.
	{FilterDeadline, false, filterDeadline},
	{FilterRegion, false, func(r *fitReq, cl *class) string {
		if !regionAllowed(r.regions, cl.first.Region) {
			return fmt.Sprintf("region %q is not allowed by spec.regions", cl.first.Region)
		}
		return ""
	}},
	{FilterNodeSelector, false, func(r *fitReq, cl *class) string {
		for _, kv := range r.selector {
			got := cl.first.Labels[kv[0]]
			if got == kv[1] {
				continue
			}
			if state.UniqueLabel(kv[0]) && len(cl.nodes) > 1 {
				// Nodes of a class differ in their unique labels; the one
				// a job selects is always in a class of its own.
				return fmt.Sprintf("no node of the group has label %s=%q (nodeSelector)", kv[0], kv[1])
			}
			return fmt.Sprintf("node label %s=%q does not match nodeSelector %q", kv[0], got, kv[1])
		}
		return ""
	}},
	// Isolation: an image job never runs on the host instead, and a
	// tenant's job never runs where it could read the control plane.
	{FilterRuntime, false, func(r *fitReq, cl *class) string {
		if r.image && !cl.first.HasRuntime(model.RuntimeContainer) {
			return "node has no container runtime (podman) and the job names an image (spec.run.image): it is never run on the host instead"
		}
		return ""
	}},
	{FilterIsolation, false, func(r *fitReq, cl *class) string {
		if !r.trusted && cl.first.NotIsolated {
			return "node does not isolate workloads (its agent is not root, or runs jobs as its own user): only admins' jobs run on it"
		}
		return ""
	}},
	// The image's CUDA against the node's driver (NVIDIA's table); a node
	// whose driver is unknown (fake GPUs) is not judged here, its agent
	// checks the image before it starts.
	{FilterCUDA, false, func(r *fitReq, cl *class) string {
		if r.cuda == "" || cl.first.Driver == "" {
			return ""
		}
		if v := cuda.Check(r.cuda, cl.first.Driver); !v.OK {
			return "node's NVIDIA driver cannot run the job's image: " + v.Reason
		}
		return ""
	}},
	// Whole-node CPU and memory, for GPU and CPU-only jobs alike.
	{FilterCPU, false, func(r *fitReq, cl *class) string {
		if r.cpu > 0 && cl.first.CPU < r.cpu {
			return fmt.Sprintf("node has %.1f CPUs, job needs %.1f per replica", cl.first.CPU, r.cpu)
		}
		return ""
	}},
	{FilterMemory, false, func(r *fitReq, cl *class) string {
		if r.mem > 0 && cl.first.Memory < r.mem {
			return fmt.Sprintf("node has %s memory, job needs %s per replica", cl.first.Memory, r.mem)
		}
		return ""
	}},
	// GPU facts, from the most to the least basic.
	{FilterNoGPUs, true, func(r *fitReq, cl *class) string {
		if cl.size == 0 {
			return "node has no GPUs"
		}
		return ""
	}},
	{FilterGPUModel, true, func(r *fitReq, cl *class) string {
		if !modelAllowed(r.models, cl.gpuModel) {
			return fmt.Sprintf("GPU model %s is not in %v", cl.gpuModel, r.models)
		}
		return ""
	}},
	{FilterGPUMemory, true, func(r *fitReq, cl *class) string {
		if r.minMem > 0 && cl.gpuMem < r.minMem {
			return fmt.Sprintf("GPUs have %s memory, job needs ≥ %s", cl.gpuMem, r.minMem)
		}
		return ""
	}},
	// Shared and whole-GPU nodes never mix.
	{FilterSharing, true, func(r *fitReq, cl *class) string {
		switch {
		case r.share > 0 && !cl.shared:
			return "GPUs are not shareable (the node pool does not mark them so)"
		case r.share == 0 && cl.shared:
			return "GPUs are shared; whole-GPU jobs never land on them"
		}
		return ""
	}},
	{FilterGPUCount, true, func(r *fitReq, cl *class) string {
		if r.share == 0 && r.g > cl.size {
			return fmt.Sprintf("node has %d GPUs, job needs %d per replica", len(cl.first.GPUs), r.g)
		}
		return ""
	}},
	{FilterInterconnect, true, func(r *fitReq, cl *class) string {
		if r.share > 0 {
			return ""
		}
		switch {
		case r.strictIC:
			best := 0
			for _, g := range cl.groups {
				best = max(best, bits.OnesCount64(g))
			}
			if best < r.g {
				return fmt.Sprintf("largest NVLink domain has %d GPUs, job needs %d over %s", best, r.g, r.ic)
			}
		case r.ic == "pcie" && cl.nvlink:
			return "node's GPUs are NVLink-connected and the job asks for pcie"
		}
		return ""
	}},
	// Price last: it depends on the share a job takes on the class.
	{FilterPrice, true, func(r *fitReq, cl *class) string {
		if r.maxPrice <= 0 {
			return ""
		}
		if r.share > 0 {
			share := r.shareOn(cl)
			if p := cl.gpuPrice * share * float64(r.replicas); p > r.maxPrice {
				return fmt.Sprintf("costs $%.2f/h, above maxPricePerHour $%.2f", p, r.maxPrice)
			}
			return ""
		}
		if total := cl.gpuPrice * float64(r.g*r.replicas); total > r.maxPrice {
			return fmt.Sprintf("costs $%.2f/h for %d GPUs, above maxPricePerHour $%.2f", total, r.g*r.replicas, r.maxPrice)
		}
		return ""
	}},
}

func filterCapacityType(r *fitReq, cl *class) string {
	ct := cl.first.CapacityType
	switch {
	case r.spot == model.SpotRequired && ct != model.Spot:
		return "job requires spot capacity"
	case r.spot == model.SpotNever && ct == model.Spot:
		if r.specSpot != model.SpotNever {
			return "node is spot and the job falls back to on-demand (retries.onDemandAfterPreemptions)"
		}
		return "node is spot and the job does not allow spot"
	}
	return ""
}

func filterDeadline(r *fitReq, cl *class) string {
	if !r.deadline.set() || cl.first.CapacityType != model.Spot {
		return ""
	}
	// A gang takes as many nodes of the class as its replicas need; any
	// of them being interrupted interrupts it.
	perNode := 1
	if r.g > 0 && cl.size >= r.g {
		perNode = cl.size / r.g
	}
	replicas := max(r.replicas, 1)
	nodes := (replicas + perNode - 1) / perNode
	p, ok := spotRisk(r.deadline, cl.first.InterruptionRate, nodes, cl.first.RestartTime.D())
	if ok {
		return ""
	}
	return deadlineRiskMessage("node is spot", p, cl.first.InterruptionRate)
}

// deadlineRiskMessage says why spot capacity was refused for a deadline.
func deadlineRiskMessage(what string, p, rate float64) string {
	if rate <= 0 {
		return what + " with no known interruption rate, and limits.deadline leaves no room for one interruption (half a checkpoint interval plus the restart time)"
	}
	return fmt.Sprintf("%s at %.3g interruptions per instance-hour: the job finishes by limits.deadline with probability %.0f%%, below the %.0f%% spot needs (a later deadline, a shorter checkpoint.interval or checkpoint.restart raises it)",
		what, rate, 100*math.Floor(100*p)/100, 100*DeadlineConfidence)
}

// staticFit runs the filters: the first failing one's code and message,
// or "" when a node of class cl could host one replica.
func staticFit(r *fitReq, cl *class) (code, msg string) {
	for i := range filters {
		f := &filters[i]
		if f.gpu && !r.wantsGPU() {
			continue
		}
		if msg := f.check(r, cl); msg != "" {
			return f.code, msg
		}
	}
	return "", ""
}
