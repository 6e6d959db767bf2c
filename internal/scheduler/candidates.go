package scheduler

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// maxCandidates bounds the offers listed per unplaceable job.
const maxCandidates = 5

// Assumptions of the expected cost to finish.
const (
	// DefaultRuntime is assumed for a job with no estimate or limit.
	DefaultRuntime = time.Hour
	// RestartTime is the time an interrupted spot job loses to launching a
	// new instance and restoring its checkpoint.
	RestartTime = 5 * time.Minute
)

type candKey struct {
	sig      sigKey
	runtime  time.Duration
	interval model.Duration
}

type candResult struct {
	c       Candidate
	ok      bool
	reasons []Reason
}

// ExpectedCost is the expected cost to finish a job of runtime on
// instances of o: price × (runtime + expected spot overhead), where the
// overhead is the expected interruptions (rate × instances × hours) times
// the work lost to each (half a checkpoint interval, or half the run
// without checkpoints) plus the restart time.
func ExpectedCost(o model.Offer, instances int, runtime, checkpointInterval time.Duration) float64 {
	hours := runtime.Hours()
	rate := o.PricePerHour * float64(instances)
	if o.CapacityType != model.Spot || o.InterruptionRate <= 0 {
		return rate * hours
	}
	lost := runtime / 2
	if checkpointInterval > 0 && checkpointInterval < runtime {
		lost = checkpointInterval / 2
	}
	interruptions := o.InterruptionRate * float64(instances) * hours
	return rate * (hours + interruptions*(lost+RestartTime).Hours())
}

// candidates ranks the offers that could run pj by expected cost to
// finish, respecting its constraints, and adds them to the plan; if none
// qualifies, the verdict says why per offer group.
func (s *sched) candidates(pj *pjob, v *Verdict) {
	if len(s.offers) == 0 {
		return
	}
	if s.candCache == nil {
		s.candCache = map[candKey]candResult{}
	}
	key := candKey{sig: sigOf(pj), runtime: pj.runtime, interval: pj.job.Spec.Checkpoint.Interval}
	r, ok := s.candCache[key]
	if !ok {
		r = s.rankOffers(pj)
		s.candCache[key] = r
	}
	if !r.ok {
		v.Reasons = append(v.Reasons, r.reasons...)
		return
	}
	c := r.c
	c.JobID = pj.job.ID
	s.plan.Candidates = append(s.plan.Candidates, c)
}

func (s *sched) rankOffers(pj *pjob) candResult {
	spec := &pj.job.Spec
	perReplica := max(pj.g, 1)
	runtime, assumed := pj.runtime, false
	if runtime <= 0 {
		runtime, assumed = DefaultRuntime, true
	}
	type scored struct {
		o         model.Offer
		instances int
		cost      float64
	}
	var list []scored
	why := map[string]int{}
	for _, o := range s.offers {
		msg := ""
		switch {
		case o.GPUCount < perReplica:
			msg = fmt.Sprintf("instance has fewer than %d GPUs", perReplica)
		case !modelAllowed(spec.Resources.GPU.Models, o.GPU):
			msg = "GPU model not allowed"
		case spec.Resources.GPU.MinMemory > 0 && o.GPUMemory < spec.Resources.GPU.MinMemory:
			msg = fmt.Sprintf("GPU memory below %s", spec.Resources.GPU.MinMemory)
		case pj.spot == model.SpotNever && o.CapacityType == model.Spot:
			msg = "spot, and the job does not allow spot"
			if spec.Spot != model.SpotNever {
				msg = "spot, and the job falls back to on-demand (retries.onDemandAfterPreemptions or limits.deadline)"
			}
		case pj.spot == model.SpotRequired && o.CapacityType != model.Spot:
			msg = "not spot, and the job requires spot"
		case !regionAllowed(spec.Regions, o.Region):
			msg = "region not allowed by spec.regions"
		case (spec.Resources.GPU.Interconnect == "nvlink" || spec.Resources.GPU.Interconnect == "nvswitch") && o.Interconnect == "pcie":
			msg = "GPUs are PCIe-only and the job asks for " + spec.Resources.GPU.Interconnect
		}
		if msg != "" {
			why[msg]++
			continue
		}
		perInstance := o.GPUCount / perReplica
		instances := (spec.Replicas + perInstance - 1) / perInstance
		if spec.MaxPricePerHour > 0 && o.PricePerHour*float64(instances) > spec.MaxPricePerHour {
			why[fmt.Sprintf("above maxPricePerHour $%.2f", spec.MaxPricePerHour)]++
			continue
		}
		list = append(list, scored{o, instances, ExpectedCost(o, instances, runtime, spec.Checkpoint.Interval.D())})
	}
	if len(list) == 0 {
		var rs []Reason
		for msg, n := range why {
			rs = append(rs, Reason{Scope: fmt.Sprintf("offers(%d)", n), Message: msg})
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Message < rs[j].Message })
		return candResult{reasons: append([]Reason{{Scope: "offer", Message: "no offer in the catalog meets the job's constraints"}}, rs...)}
	}
	sort.SliceStable(list, func(i, j int) bool {
		if math.Abs(list[i].cost-list[j].cost) > 1e-9 {
			return list[i].cost < list[j].cost
		}
		a, b := list[i].o, list[j].o
		return a.Provider+a.Region+a.Zone+a.InstanceType+string(a.CapacityType) < b.Provider+b.Region+b.Zone+b.InstanceType+string(b.CapacityType)
	})
	c := Candidate{Instances: list[0].instances, ExpectedCost: list[0].cost, RuntimeAssumed: assumed}
	for i := 0; i < len(list) && i < maxCandidates; i++ {
		c.Offers = append(c.Offers, list[i].o)
		c.Costs = append(c.Costs, list[i].cost)
	}
	return candResult{c: c, ok: true}
}
