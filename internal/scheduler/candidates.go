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

// candKey is what candidates reads of a job: its feasibility (one per
// fitKey in a pass, so the pointer stands for the key), runtime and
// checkpoint interval.
type candKey struct {
	f        *feasibility
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
func (s *sched) candidates(pj *pjob, f *feasibility, v *Verdict) {
	if len(s.offers) == 0 {
		return
	}
	r := s.rankOffers(candKey{f: f, runtime: pj.runtime, interval: pj.interval})
	if !r.ok {
		v.Reasons = append(v.Reasons, r.reasons...)
		return
	}
	c := r.c
	c.JobID = pj.id
	if s.plan.Candidates == nil {
		// One allocation for the pass rather than a list grown job by
		// job: behind a full fleet most queued jobs have candidates.
		s.plan.Candidates = make([]Candidate, 0, len(s.snap.Pending))
	}
	s.plan.Candidates = append(s.plan.Candidates, c)
}

// offerFit is which offers a job of one fitKey may run on, in catalog
// order, with the instances it takes of each; or, when none, why not.
// Jobs of one shape and different runtimes (the cost) share it.
type offerFit struct {
	fits    []fitOffer
	reasons []Reason // when fits is empty
	// last is the offers (indexes) of the last candidate ranked, and
	// lastOffers their list.
	last       []int
	lastOffers []model.Offer
	// lastKey and lastResult are the last ranking asked for and given.
	lastKey    candKey
	lastResult candResult
}

type fitOffer struct {
	i         int // index into s.offers
	instances int
}

// rankOffers reads the job only through its key, which is what the result
// is cached by.
func (s *sched) rankOffers(key candKey) candResult {
	of := s.fitOffers(key.f)
	if len(of.fits) == 0 {
		return candResult{reasons: of.reasons}
	}
	// Runs of jobs with one runtime (or none) share the last result.
	if of.lastKey == key && of.lastResult.ok {
		return of.lastResult
	}
	defer func() { of.lastKey = key }()
	runtime, assumed := key.runtime, false
	if runtime <= 0 {
		runtime, assumed = DefaultRuntime, true
	}
	// Only the best maxCandidates are kept, by insertion into a short
	// sorted list: sorting every fitting offer of a large catalog per job
	// class dominated a pass.
	type scored struct {
		i         int // index into s.offers
		instances int
		cost      float64
	}
	var top [maxCandidates]scored
	n := 0
	for _, fo := range of.fits {
		x := scored{fo.i, fo.instances, ExpectedCost(s.offers[fo.i], fo.instances, runtime, key.interval.D())}
		// Cheaper first; equal costs by offer identity, then catalog order
		// (what a stable sort gave).
		less := func(a, b scored) bool {
			if math.Abs(a.cost-b.cost) > 1e-9 {
				return a.cost < b.cost
			}
			if ka, kb := s.offerRank(a.i), s.offerRank(b.i); ka != kb {
				return ka < kb
			}
			return a.i < b.i
		}
		if n == maxCandidates && !less(x, top[n-1]) {
			continue
		}
		j := min(n, maxCandidates-1)
		for j > 0 && less(x, top[j-1]) {
			top[j] = top[j-1]
			j--
		}
		top[j] = x
		n = min(n+1, maxCandidates)
	}
	c := Candidate{Instances: top[0].instances, ExpectedCost: top[0].cost, RuntimeAssumed: assumed, Costs: make([]float64, n)}
	same := n == len(of.last)
	for k, x := range top[:n] {
		c.Costs[k] = x.cost
		same = same && of.last[k] == x.i
	}
	if !same {
		// Candidates share their offer lists (nothing changes one in
		// place): jobs of one shape and different runtimes usually rank
		// the same offers, so one list serves them, rather than five
		// offers copied per job and pass.
		of.last, of.lastOffers = make([]int, n), make([]model.Offer, n)
		for k, x := range top[:n] {
			of.last[k], of.lastOffers[k] = x.i, s.offers[x.i]
		}
	}
	c.Offers = of.lastOffers
	of.lastResult = candResult{c: c, ok: true}
	return of.lastResult
}

// fitOffers is the offers a job of f's fitKey may run on (kept with f
// for the pass).
func (s *sched) fitOffers(f *feasibility) *offerFit {
	if f.offers != nil {
		return f.offers
	}
	of := &offerFit{}
	f.offers = of
	r := f.key.req()
	perReplica := max(r.g, 1)
	// Why offers do not fit, counted by kind; the messages are only
	// written when none fits (formatting one per offer cost a pass dear).
	const (
		fewerGPUs = iota
		modelNotAllowed
		lowMemory
		spotNotAllowed
		spotFallback
		deadlineRisk
		notSpot
		regionDenied
		pcieOnly
		abovePrice
		whyKinds
	)
	var why [whyKinds]int
	// The best chance of finishing by the deadline among spot offers
	// refused for it, and that offer's rate, for the message.
	bestRisk, bestRate := -1.0, 0.0
	for oi := range s.offers {
		o := &s.offers[oi]
		k := -1
		switch {
		case o.GPUCount < perReplica:
			k = fewerGPUs
		case !modelAllowed(r.models, o.GPU):
			k = modelNotAllowed
		case r.minMem > 0 && o.GPUMemory < r.minMem:
			k = lowMemory
		case r.spot == model.SpotNever && o.CapacityType == model.Spot:
			k = spotNotAllowed
			if r.specSpot != model.SpotNever {
				k = spotFallback
			}
		case r.spot == model.SpotRequired && o.CapacityType != model.Spot:
			k = notSpot
		case !regionAllowed(r.regions, o.Region):
			k = regionDenied
		case r.strictIC && o.Interconnect == "pcie":
			k = pcieOnly
		}
		if k >= 0 {
			why[k]++
			continue
		}
		perInstance := o.GPUCount / perReplica
		instances := (r.replicas + perInstance - 1) / perInstance
		if r.deadline.set() && o.CapacityType == model.Spot {
			if p, ok := spotRisk(r.deadline, o.InterruptionRate, instances, o.RestartTime.D()); !ok {
				why[deadlineRisk]++
				if p > bestRisk {
					bestRisk, bestRate = p, o.InterruptionRate
				}
				continue
			}
		}
		if r.maxPrice > 0 && o.PricePerHour*float64(instances) > r.maxPrice {
			why[abovePrice]++
			continue
		}
		of.fits = append(of.fits, fitOffer{oi, instances})
	}
	if len(of.fits) > 0 {
		return of
	}
	msgs := [whyKinds]string{
		fewerGPUs:       fmt.Sprintf("instance has fewer than %d GPUs", perReplica),
		modelNotAllowed: "GPU model not allowed",
		lowMemory:       fmt.Sprintf("GPU memory below %s", r.minMem),
		spotNotAllowed:  "spot, and the job does not allow spot",
		spotFallback:    "spot, and the job falls back to on-demand (retries.onDemandAfterPreemptions)",
		notSpot:         "not spot, and the job requires spot",
		regionDenied:    "region not allowed by spec.regions",
		pcieOnly:        "GPUs are PCIe-only and the job asks for " + r.ic,
		abovePrice:      fmt.Sprintf("above maxPricePerHour $%.2f", r.maxPrice),
	}
	if why[deadlineRisk] > 0 {
		msgs[deadlineRisk] = deadlineRiskMessage("spot", bestRisk, bestRate)
	}
	var rs []Reason
	for k, n := range why {
		if n > 0 {
			rs = append(rs, Reason{Scope: fmt.Sprintf("offers(%d)", n), Message: msgs[k]})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Message < rs[j].Message })
	of.reasons = append([]Reason{{Scope: "offer", Message: "no offer in the catalog meets the job's constraints"}}, rs...)
	return of
}

// offerRank is offer i's place in the order of its identity string
// (provider, region, zone, instance type, capacity type concatenated), the
// tie-break between offers of equal cost; computed once per pass.
func (s *sched) offerRank(i int) int {
	if s.offerRanks == nil {
		keys := make([]string, len(s.offers))
		idx := make([]int, len(s.offers))
		for j, o := range s.offers {
			keys[j] = o.Provider + o.Region + o.Zone + o.InstanceType + string(o.CapacityType)
			idx[j] = j
		}
		sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
		s.offerRanks = make([]int, len(s.offers))
		for r, j := range idx {
			s.offerRanks[j] = r
		}
		// Equal identity strings share a rank, so catalog order decides.
		for r := 1; r < len(idx); r++ {
			if keys[idx[r]] == keys[idx[r-1]] {
				s.offerRanks[idx[r]] = s.offerRanks[idx[r-1]]
			}
		}
	}
	return s.offerRanks[i]
}
