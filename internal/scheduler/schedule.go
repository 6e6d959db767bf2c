package scheduler

import (
	"fmt"
	"math"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// maxCandidates bounds the offers listed per unplaceable job.
const maxCandidates = 5

// Schedule computes a Plan for snap. offers may be empty. seed is the source
// of any tie-breaking randomness; the FIFO scheduler breaks ties by node id
// and needs none, but callers pass it so a scheduler that does can replace
// this one without changing them.
func Schedule(snap *state.Snapshot, offers []model.Offer, now time.Time, seed int64) Plan {
	_, _ = now, seed
	plan := Plan{SnapshotVersion: snap.Version, Verdicts: map[string]Verdict{}}
	free := newFreeSet(snap)
	position := 0
	for _, job := range snap.Pending {
		position++
		placements, reasons := placeJob(job, snap, free)
		if placements != nil {
			plan.Bindings = append(plan.Bindings, Binding{JobID: job.ID, JobVersion: job.Version, Replicas: placements})
			continue
		}
		v := Verdict{Position: position, Reasons: reasons}
		if c, ok := candidateFor(job, offers); ok {
			plan.Candidates = append(plan.Candidates, c)
		} else if len(offers) > 0 {
			v.Reasons = append(v.Reasons, Reason{Scope: "offer", Message: "no offer in the catalog meets the job's constraints"})
		}
		plan.Verdicts[job.ID] = v
	}
	return plan
}

// freeSet is the pass's working copy of free resources: nodes are copied on
// first change so the snapshot stays untouched.
type freeSet struct {
	snap    *state.Snapshot
	changed map[int]*state.NodeView
}

func newFreeSet(snap *state.Snapshot) *freeSet {
	return &freeSet{snap: snap, changed: map[int]*state.NodeView{}}
}

func (f *freeSet) view(i int) *state.NodeView {
	if v, ok := f.changed[i]; ok {
		return v
	}
	return &f.snap.Nodes[i]
}

func (f *freeSet) take(i int, gpus []int, cpu float64, mem model.Bytes) {
	v, ok := f.changed[i]
	if !ok {
		c := f.snap.Nodes[i]
		c.Free = append([]int(nil), c.Free...)
		v = &c
		f.changed[i] = v
	}
	taken := map[int]bool{}
	for _, g := range gpus {
		taken[g] = true
	}
	kept := v.Free[:0]
	for _, g := range v.Free {
		if !taken[g] {
			kept = append(kept, g)
		}
	}
	v.Free = kept
	v.FreeCPU -= cpu
	v.FreeMemory -= mem
}

type undo struct {
	node int
	view *state.NodeView
	had  bool
}

// placeJob binds every replica or none. On failure it returns the reasons,
// grouped so a large cluster gives a short answer.
func placeJob(job *model.Job, snap *state.Snapshot, free *freeSet) ([]Placement, []Reason) {
	res := job.Spec.Resources
	if res.GPUs > 0 && res.GPUs < 1 {
		return nil, []Reason{{Scope: "job", Message: fmt.Sprintf("asks for %.2f of a GPU, but no node pool marks its GPUs shareable", res.GPUs)}}
	}
	if len(snap.Nodes) == 0 {
		return nil, []Reason{{Scope: "job", Message: "no nodes are registered"}}
	}
	var (
		placements []Placement
		undos      []undo
		why        = map[string][]string{}
	)
	for rank := 0; rank < job.Spec.Replicas; rank++ {
		placed := false
		for i := range snap.Nodes {
			v := free.view(i)
			gpus, reason := fit(job, v)
			if reason != "" {
				if rank == 0 {
					why[reason] = append(why[reason], v.Node.ID)
				}
				continue
			}
			prev, had := free.changed[i]
			var saved *state.NodeView
			if had {
				c := *prev
				c.Free = append([]int(nil), prev.Free...)
				saved = &c
			}
			undos = append(undos, undo{node: i, view: saved, had: had})
			free.take(i, gpus, res.CPU, res.Memory)
			placements = append(placements, Placement{Rank: rank, NodeID: v.Node.ID, GPUs: gpus})
			placed = true
			break
		}
		if !placed {
			for k := len(undos) - 1; k >= 0; k-- {
				u := undos[k]
				if u.had {
					free.changed[u.node] = u.view
				} else {
					delete(free.changed, u.node)
				}
			}
			if rank > 0 {
				return nil, []Reason{{Scope: "job", Message: fmt.Sprintf("only %d of %d replicas fit at once; replicas start together or not at all", rank, job.Spec.Replicas)}}
			}
			return nil, groupReasons(why)
		}
	}
	return placements, nil
}

// fit says which GPUs of node v one replica of job would take, or why none.
func fit(job *model.Job, v *state.NodeView) ([]int, string) {
	n := v.Node
	spec := &job.Spec
	res := spec.Resources
	if n.State != model.NodeReady {
		return nil, fmt.Sprintf("node is %s", n.State)
	}
	switch {
	case spec.Spot == model.SpotRequired && n.CapacityType != model.Spot:
		return nil, "job requires spot capacity"
	case spec.Spot == model.SpotNever && n.CapacityType == model.Spot:
		return nil, "node is spot and the job does not allow spot"
	}
	if !regionAllowed(spec.Regions, n.Region) {
		return nil, fmt.Sprintf("region %q is not allowed by spec.regions", n.Region)
	}
	if res.CPU > 0 && v.FreeCPU < res.CPU {
		return nil, fmt.Sprintf("%.1f CPUs free, job needs %.1f", math.Max(v.FreeCPU, 0), res.CPU)
	}
	if res.Memory > 0 && v.FreeMemory < res.Memory {
		return nil, fmt.Sprintf("%s memory free, job needs %s", v.FreeMemory, res.Memory)
	}
	want := int(res.GPUs)
	if want == 0 {
		return nil, ""
	}
	if want > len(n.GPUs) {
		return nil, fmt.Sprintf("node has %d GPUs, job needs %d per replica", len(n.GPUs), want)
	}
	if spec.MaxPricePerHour > 0 && len(n.GPUs) > 0 {
		share := n.PricePerHour * float64(want) / float64(len(n.GPUs))
		if share > spec.MaxPricePerHour {
			return nil, fmt.Sprintf("costs $%.2f/h for %d GPUs, above maxPricePerHour $%.2f", share, want, spec.MaxPricePerHour)
		}
	}
	byIndex := make(map[int]model.GPU, len(n.GPUs))
	for _, g := range n.GPUs {
		byIndex[g.Index] = g
	}
	var ok []model.GPU
	var modelMiss, memMiss int
	for _, idx := range v.Free {
		g := byIndex[idx]
		switch {
		case !modelAllowed(res.GPU.Models, g.Model):
			modelMiss++
		case res.GPU.MinMemory > 0 && g.Memory < res.GPU.MinMemory:
			memMiss++
		default:
			ok = append(ok, g)
		}
	}
	if len(ok) < want {
		switch {
		case modelMiss > 0 && len(ok) == 0:
			return nil, fmt.Sprintf("GPU model %s is not in %v", n.GPUs[0].Model, res.GPU.Models)
		case memMiss > 0 && len(ok) == 0:
			return nil, fmt.Sprintf("GPUs have %s memory, job needs ≥ %s", n.GPUs[0].Memory, res.GPU.MinMemory)
		default:
			return nil, fmt.Sprintf("%d matching GPUs free, job needs %d", len(ok), want)
		}
	}
	return pickGPUs(ok, want), ""
}

// pickGPUs prefers GPUs that share an NVLink group, so a replica's GPUs talk
// over NVLink rather than PCIe; ties go to the lowest indexes.
func pickGPUs(free []model.GPU, want int) []int {
	groups := map[int][]int{}
	var order []int
	for _, g := range free {
		if _, seen := groups[g.NVLinkGroup]; !seen {
			order = append(order, g.NVLinkGroup)
		}
		groups[g.NVLinkGroup] = append(groups[g.NVLinkGroup], g.Index)
	}
	best := -1
	for _, grp := range order {
		if grp >= 0 && len(groups[grp]) >= want && (best < 0 || len(groups[grp]) < len(groups[best])) {
			best = grp // the tightest group that fits leaves bigger groups whole
		}
	}
	if best >= 0 {
		return append([]int(nil), groups[best][:want]...)
	}
	out := make([]int, 0, want)
	for _, g := range free[:want] {
		out = append(out, g.Index)
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

func groupReasons(why map[string][]string) []Reason {
	out := make([]Reason, 0, len(why))
	for msg, nodes := range why {
		scope := "node/" + nodes[0]
		if len(nodes) > 1 {
			scope = fmt.Sprintf("nodes(%d)", len(nodes))
		}
		out = append(out, Reason{Scope: scope, Message: msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope+out[i].Message < out[j].Scope+out[j].Message })
	return out
}

// candidateFor ranks the offers that could run job, cheapest total price for
// all its replicas first.
func candidateFor(job *model.Job, offers []model.Offer) (Candidate, bool) {
	spec := &job.Spec
	perReplica := int(math.Ceil(spec.Resources.GPUs))
	if perReplica == 0 || len(offers) == 0 {
		return Candidate{}, false
	}
	type scored struct {
		o         model.Offer
		instances int
		total     float64
	}
	var list []scored
	for _, o := range offers {
		if o.GPUCount < perReplica || !modelAllowed(spec.Resources.GPU.Models, o.GPU) {
			continue
		}
		if spec.Resources.GPU.MinMemory > 0 && o.GPUMemory < spec.Resources.GPU.MinMemory {
			continue
		}
		if (spec.Spot == model.SpotNever && o.CapacityType == model.Spot) || (spec.Spot == model.SpotRequired && o.CapacityType != model.Spot) {
			continue
		}
		if !regionAllowed(spec.Regions, o.Region) {
			continue
		}
		perInstance := o.GPUCount / perReplica
		instances := (spec.Replicas + perInstance - 1) / perInstance
		total := o.PricePerHour * float64(instances)
		if spec.MaxPricePerHour > 0 && total > spec.MaxPricePerHour {
			continue
		}
		list = append(list, scored{o, instances, total})
	}
	if len(list) == 0 {
		return Candidate{}, false
	}
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].total != list[j].total {
			return list[i].total < list[j].total
		}
		a, b := list[i].o, list[j].o
		return a.Provider+a.Region+a.Zone+a.InstanceType < b.Provider+b.Region+b.Zone+b.InstanceType
	})
	c := Candidate{JobID: job.ID, Instances: list[0].instances}
	for i := 0; i < len(list) && i < maxCandidates; i++ {
		c.Offers = append(c.Offers, list[i].o)
	}
	return c, true
}
