package autoscaler

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Defaults for Input's zero values.
const (
	DefaultLaunchTimeout = 10 * time.Minute
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultBackoff       = 5 * time.Minute
	MaxBackoff           = time.Hour
)

// LabelNode is the instance label naming the node an instance was launched
// for; an instance whose label names a node the store knows is not a leak.
const LabelNode = "gpufleet.dev/node"

// Node is a node the control plane owns, as the autoscaler needs it.
type Node struct {
	ID         string
	Pool       string
	Provider   string // the driver that launched it
	InstanceID string
	State      model.NodeState
	Offer      model.Offer
	LaunchedAt time.Time
	// Busy: some live attempt holds GPUs on it. IdleSince: when it last
	// stopped being busy (or became ready).
	Busy      bool
	IdleSince time.Time
	// FreeGPUs is what pending work could still use. For a launching node
	// pass the instance's whole GPU count: Decide takes off what the
	// pending jobs it was launched for (ForJobs) will hold.
	FreeGPUs int
	// ForJobs are the pending jobs it was launched for.
	ForJobs []string
}

// Pending is a job that fits on no node, with the scheduler's candidate
// offers, best first.
type Pending struct {
	JobID    string
	Replicas int
	GPUs     int // per replica
	// Shared is set for a job that takes a share of one GPU (0 <
	// resources.gpus < 1): it runs only on a pool that marks its GPUs
	// shareable (spec.sharedGPUs), and a whole-GPU job only on one that
	// does not, so each launches only into such pools — else the node
	// bought for it could never take it and idles, again and again.
	Shared bool
	// Offers are the candidate offers, best first; Costs their expected
	// cost to finish.
	Offers []model.Offer
	Costs  []float64
}

// suits reports whether a pool whose GPUs are shareable (shared) or not
// can run the job: a CPU-only job runs on either.
func (p *Pending) suits(shared bool) bool { return p.GPUs == 0 && !p.Shared || shared == p.Shared }

// Instance is a provider's view of one of its instances.
type Instance struct {
	Provider string
	ID       string
	Labels   map[string]string
}

// Input is everything Decide looks at.
type Input struct {
	Now     time.Time
	Pools   []*model.NodePool
	Nodes   []Node
	Pending []Pending
	// Inventory lists, per provider driver, the instances it holds. A
	// provider absent from the map is not checked for leaks.
	Inventory map[string][]Instance
	Memory    *Memory
	// LaunchTimeout bounds launching → ready (DefaultLaunchTimeout).
	LaunchTimeout time.Duration
	// Drivers are the drivers of the pools gpufleet launches into, by
	// pool name. A pool absent from it (its driver is fixed capacity,
	// or not built) is never launched into or scaled down.
	Drivers map[string]PoolDriver
	// Offers are all the offers the providers sell now, so that a pool
	// below its min launches even when no pending job names a candidate.
	Offers []model.Offer
}

// PoolDriver is what the autoscaler knows of a pool's driver: its name
// (Action.Provider) and which offers it sells (the sim driver sells aws,
// gcp… offers; a pool narrowed to some clouds sells only theirs). Sells
// nil sells every offer.
type PoolDriver struct {
	Name  string
	Sells func(model.Offer) bool
}

// Drivers maps pool names to their launching drivers.
type Drivers map[string]PoolDriver

// buys reports whether pool p has a launching driver.
func (d Drivers) buys(p *model.NodePool) bool {
	_, ok := d[p.Name]
	return ok
}

// launches reports whether pool p's driver launches and sells o, and p
// admits it.
func (d Drivers) launches(p *model.NodePool, o model.Offer) bool {
	pd, ok := d[p.Name]
	return ok && (pd.Sells == nil || pd.Sells(o)) && Admits(p, o)
}

// ActionKind names an action.
type ActionKind string

// Action kinds.
const (
	Launch    ActionKind = "launch"
	Terminate ActionKind = "terminate"
)

// Reasons for terminating.
const (
	ReasonIdle          = "idle"
	ReasonLeak          = "leak"
	ReasonLaunchTimeout = "launch-timeout"
	ReasonInterrupted   = "interrupted"
)

// Action is one thing to do.
type Action struct {
	Kind     ActionKind
	Pool     string
	Provider string
	Offer    model.Offer
	// Count instances of Offer (Launch).
	Count int
	// Jobs the launch is for; Failover is set when an earlier offer for
	// one of them failed (FailedOffer).
	Jobs        []string
	Failover    bool
	FailedOffer string
	// NodeID / InstanceID to terminate.
	NodeID     string
	InstanceID string
	Reason     string
}

// OfferIdent is OfferKey as a comparable value: a map key that costs no
// allocation, for the loops that look up every offer of a pool per cycle.
type OfferIdent struct {
	Provider, Region, Zone, InstanceType string
	CapacityType                         model.CapacityType
}

// IdentOf returns o's OfferIdent.
func IdentOf(o model.Offer) OfferIdent {
	return OfferIdent{Provider: o.Provider, Region: o.Region, Zone: o.Zone, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
}

// OfferKey identifies an offer.
func OfferKey(o model.Offer) string {
	var buf [128]byte
	return string(appendOfferKey(buf[:0], o))
}

// appendOfferKey appends OfferKey(o) to b: a lookup by
// m[string(appendOfferKey(buf[:0], o))] allocates nothing.
func appendOfferKey(b []byte, o model.Offer) []byte {
	b = append(append(b, o.Provider...), '/')
	b = append(append(b, o.Region...), '/')
	b = append(append(b, o.Zone...), '/')
	b = append(append(b, o.InstanceType...), '/')
	return append(b, o.CapacityType...)
}

// Memory remembers failing offers for a while, and the last failure per
// job for the failover order. It is data: the controller keeps it between
// cycles and updates it with Fail, MarkOffer and MarkRegion.
type Memory struct {
	Until    map[string]time.Time // offer key → not before
	Failures map[string]int       // offer key → consecutive failures
	JobLast  map[string]model.Offer
	// Unavailable is what providers said they cannot sell, by
	// Unavailable.Key, until each entry's Until: an offer without
	// capacity, a pool's provider region out of quota. The controller
	// persists it, so a restart does not retry them at once.
	Unavailable map[string]Unavailable
	// shared are the maps a view from Share may still read (sharedUntil
	// and the rest): the mutators copy such a map before writing it.
	shared uint8
	gen    uint64 // Gen
}

// Gen counts the writes made through m's methods: while it stands, m
// reads as it did (for a caller that writes m only through them).
func (m *Memory) Gen() uint64 { return m.gen }

// The maps of a Memory, as bits of Memory.shared.
const (
	sharedUntil uint8 = 1 << iota
	sharedFailures
	sharedJobLast
	sharedUnavailable
	sharedAll = sharedUntil | sharedFailures | sharedJobLast | sharedUnavailable
)

// own makes the maps of bits m's own before a write, and counts the
// write (Gen): each map a view (Share) may still read is copied first.
func (m *Memory) own(bits uint8) {
	m.gen++
	bits &= m.shared
	if bits == 0 {
		return
	}
	if bits&sharedUntil != 0 {
		m.Until = maps.Clone(m.Until)
	}
	if bits&sharedFailures != 0 {
		m.Failures = maps.Clone(m.Failures)
	}
	if bits&sharedJobLast != 0 {
		m.JobLast = maps.Clone(m.JobLast)
	}
	if bits&sharedUnavailable != 0 {
		m.Unavailable = maps.Clone(m.Unavailable)
	}
	m.shared &^= bits
}

// Unavailability kinds (model's).
const (
	UnavailableCapacity = model.UnavailableCapacity
	UnavailableQuota    = model.UnavailableQuota
)

// Time-to-live of unavailability: capacity comes back quickly
// (Karpenter's unavailable-offerings cache keeps 3 minutes), a quota
// rarely without a request to the provider.
const (
	CapacityTTL = 3 * time.Minute
	QuotaTTL    = 30 * time.Minute
)

// Unavailable is one thing a provider cannot sell now (model's).
type Unavailable = model.Unavailable

// Mark records u (replacing an entry of the same key).
func (m *Memory) Mark(u Unavailable) {
	m.own(sharedUnavailable)
	if m.Unavailable == nil {
		m.Unavailable = map[string]Unavailable{}
	}
	m.Unavailable[u.Key()] = u
}

// Expire forgets the entries whose Until is not after now, and reports
// whether it forgot any.
func (m *Memory) Expire(now time.Time) bool {
	gone := false
	for k, u := range m.Unavailable {
		if !u.Until.After(now) {
			m.own(sharedUnavailable) // ranging over the shared map, deleting from the copy
			delete(m.Unavailable, k)
			gone = true
		}
	}
	return gone
}

// UnavailableNow lists the entries in force at now, by kind then key.
func (m *Memory) UnavailableNow(now time.Time) []Unavailable {
	if m == nil {
		return nil
	}
	var out []Unavailable
	for _, u := range m.Unavailable {
		if u.Until.After(now) {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b Unavailable) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key(), b.Key())) })
	return out
}

// unavailable reports whether pool (empty: any pool) may not launch o at
// now: o has no capacity, or pool's region of o is out of quota.
func (m *Memory) unavailable(pool string, o model.Offer, now time.Time) bool {
	if m == nil || len(m.Unavailable) == 0 {
		return false
	}
	var buf [160]byte
	if u, ok := m.Unavailable[string(Unavailable{Kind: UnavailableCapacity, Offer: o}.AppendKey(buf[:0]))]; ok && u.Until.After(now) {
		return true
	}
	if pool == "" {
		return false
	}
	u, ok := m.Unavailable[string(Unavailable{Kind: UnavailableQuota, Pool: pool, Offer: o}.AppendKey(buf[:0]))]
	return ok && u.Until.After(now)
}

// Clone returns a deep copy.
func (m *Memory) Clone() *Memory {
	if m == nil {
		return nil
	}
	return &Memory{Until: maps.Clone(m.Until), Failures: maps.Clone(m.Failures), JobLast: maps.Clone(m.JobLast), Unavailable: maps.Clone(m.Unavailable)}
}

// Share returns a read-only view of m as it is now, for Decide to read
// while launches update m: the view shares m's maps, and m's methods copy
// a shared map before they first write it (copy on write), so a view
// costs nothing until then, where Clone copies every map, the jobs'
// failovers (the size of the queue) included. Nothing may write the view
// or m's maps but through m's methods. Share writes m: its caller must
// hold m as a writer would.
func (m *Memory) Share() *Memory {
	if m == nil {
		return nil
	}
	m.shared = sharedAll
	return &Memory{Until: m.Until, Failures: m.Failures, JobLast: m.JobLast, Unavailable: m.Unavailable, shared: sharedAll}
}

// Unshare tells m that no view Share returned is read any more: its
// maps are its own again, written in place.
func (m *Memory) Unshare() { m.shared = 0 }

// ForgetJobs drops the failed launches remembered for jobs that no longer
// wait (waiting reports false): a job that ran, or ended, starts its next
// launch afresh, and the memory stays the size of the queue rather than
// of every job that ever failed a launch.
func (m *Memory) ForgetJobs(waiting func(job string) bool) {
	for job := range m.JobLast {
		if !waiting(job) {
			m.own(sharedJobLast)
			delete(m.JobLast, job)
		}
	}
}

// Fail remembers that offer failed at now (for job, when set): it is not
// tried again for a back-off that doubles with each consecutive failure.
func (m *Memory) Fail(o model.Offer, job string, now time.Time) time.Time {
	m.own(sharedUntil | sharedFailures | sharedJobLast)
	if m.Until == nil {
		m.Until, m.Failures, m.JobLast = map[string]time.Time{}, map[string]int{}, map[string]model.Offer{}
	}
	k := OfferKey(o)
	m.Failures[k]++
	d := DefaultBackoff << min(m.Failures[k]-1, 4)
	d = min(d, MaxBackoff)
	m.Until[k] = now.Add(d)
	if job != "" {
		m.JobLast[job] = o
	}
	return m.Until[k]
}

// Remember records that job's launch of o failed, so its next launch is
// a failover (Action.Failover) — without backing o off: a caller that
// marks o unavailable says for how long.
func (m *Memory) Remember(job string, o model.Offer) {
	if job == "" {
		return
	}
	m.own(sharedJobLast)
	if m.JobLast == nil {
		m.JobLast = map[string]model.Offer{}
	}
	m.JobLast[job] = o
}

// Succeed forgets offer's failures.
func (m *Memory) Succeed(o model.Offer) {
	if m.Failures == nil {
		return
	}
	k := OfferKey(o)
	_, failed := m.Failures[k]
	_, backing := m.Until[k]
	if failed || backing {
		m.own(sharedFailures | sharedUntil)
		delete(m.Failures, k)
		delete(m.Until, k)
	}
}

// failing reports whether offer key k is backing off after a failure.
func (m *Memory) failing(k string, now time.Time) bool {
	if m == nil || m.Until == nil {
		return false
	}
	u, ok := m.Until[k]
	return ok && now.Before(u)
}

// out reports whether offer o may not be tried now by any pool: backing
// off, or without capacity.
func (m *Memory) out(o model.Offer, now time.Time) bool {
	if m == nil {
		return false
	}
	if len(m.Until) > 0 {
		var buf [128]byte
		if u, ok := m.Until[string(appendOfferKey(buf[:0], o))]; ok && now.Before(u) {
			return true
		}
	}
	return m.unavailable("", o, now)
}

// Decide returns the actions for one cycle, in a stable order: leaks,
// launch timeouts, idle removals, then launches.
//  1. leaks: inventory instances no node owns;
//  2. launch timeouts: launching nodes older than LaunchTimeout (the
//     caller remembers their offers as failing);
//  3. pending jobs: packed onto launching nodes that were bought for them
//     or have room, else onto launches planned this cycle, else a new
//     launch of the cheapest usable candidate inside a pool with room;
//  4. pools below Min get their cheapest admitted offer (among the
//     pending jobs' candidates and Input.Offers), pending work or not;
//  5. idle ready nodes past their pool's idle timeout are removed, never
//     below Min.
func Decide(in Input) []Action {
	if in.LaunchTimeout <= 0 {
		in.LaunchTimeout = DefaultLaunchTimeout
	}
	drivers := Drivers(in.Drivers)
	var acts []Action

	// 1. Leaks.
	owned := make(map[string]bool, len(in.Nodes)*2)
	for _, n := range in.Nodes {
		owned[n.ID] = true
		if n.InstanceID != "" {
			owned[n.Provider+"\x00"+n.InstanceID] = true
		}
	}
	provs := make([]string, 0, len(in.Inventory))
	for p := range in.Inventory {
		provs = append(provs, p)
	}
	sort.Strings(provs)
	for _, p := range provs {
		for _, inst := range in.Inventory[p] {
			if owned[p+"\x00"+inst.ID] || (inst.Labels[LabelNode] != "" && owned[inst.Labels[LabelNode]]) {
				continue
			}
			acts = append(acts, Action{Kind: Terminate, Provider: p, InstanceID: inst.ID, Reason: ReasonLeak})
		}
	}

	// 2. Launch timeouts; count the pools' nodes.
	poolByName := make(map[string]*model.NodePool, len(in.Pools))
	for _, p := range in.Pools {
		poolByName[p.Name] = p
	}
	size := map[string]int{}
	gone := map[string]bool{}
	for _, n := range in.Nodes {
		if n.State == model.NodeLaunching && in.Now.Sub(n.LaunchedAt) > in.LaunchTimeout {
			acts = append(acts, Action{Kind: Terminate, Pool: n.Pool, Provider: n.Provider, NodeID: n.ID, InstanceID: n.InstanceID, Offer: n.Offer, Reason: ReasonLaunchTimeout, Jobs: n.ForJobs})
			gone[n.ID] = true
			continue
		}
		if n.State == model.NodeLaunching || n.State == model.NodeReady || n.State == model.NodeDraining {
			size[n.Pool]++
		}
	}

	// 3. Pending jobs. Capacity in flight: launching nodes, by offer key.
	type slot struct {
		free   int
		act    int  // index into acts of a planned launch; -1 for a node
		shared bool // its pool's GPUs are shareable
	}
	inflight := map[string][]*slot{}
	covered := map[string]bool{}
	pendingByID := make(map[string]*Pending, len(in.Pending))
	for i := range in.Pending {
		pendingByID[in.Pending[i].JobID] = &in.Pending[i]
	}
	for _, n := range in.Nodes {
		if n.State != model.NodeLaunching || gone[n.ID] {
			continue
		}
		// Launching capacity counts once: what the jobs it was bought
		// for will hold is not free for others (a job no longer pending
		// holds nothing of it).
		free := n.FreeGPUs
		for _, j := range n.ForJobs {
			covered[j] = true
			if pj, ok := pendingByID[j]; ok {
				need := max(pj.GPUs, 1)
				free -= need * min(max(pj.Replicas, 1), max(n.FreeGPUs/need, 1))
			}
		}
		k := OfferKey(n.Offer)
		inflight[k] = append(inflight[k], &slot{free: max(free, 0), act: -1, shared: poolByName[n.Pool] != nil && poolByName[n.Pool].Spec.SharedGPUs})
	}
	for _, pj := range in.Pending {
		if covered[pj.JobID] {
			continue
		}
		need := max(pj.GPUs, 1)
		// 3a. A single-replica job packs onto capacity already in flight
		// or planned, which costs nothing more than buying it.
		if pj.Replicas <= 1 {
			packed := false
			for _, o := range pj.Offers {
				for _, s := range inflight[OfferKey(o)] {
					if s.free >= need && pj.suits(s.shared) {
						s.free -= need
						if s.act >= 0 {
							acts[s.act].Jobs = append(acts[s.act].Jobs, pj.JobID)
						}
						packed = true
						break
					}
				}
				if packed {
					break
				}
			}
			if packed {
				continue
			}
		}
		// 3b. A new launch: usable candidates in failover order.
		order := failoverOrder(pj, in.Memory, in.Now)
		for _, i := range order {
			o := pj.Offers[i]
			if o.GPUCount < need {
				continue
			}
			perInstance := max(o.GPUCount/need, 1)
			count := (max(pj.Replicas, 1) + perInstance - 1) / perInstance
			pool := poolFor(in.Pools, drivers, in.Memory, in.Now, o, size, count, pj.suits)
			if pool == nil {
				continue
			}
			size[pool.Name] += count
			a := Action{Kind: Launch, Pool: pool.Name, Provider: drivers[pool.Name].Name, Offer: o, Count: count, Jobs: []string{pj.JobID}, Reason: "pending job " + pj.JobID}
			if last, ok := in.Memory.jobLast(pj.JobID); ok {
				a.Failover, a.FailedOffer = true, OfferKey(last)
				a.Reason = fmt.Sprintf("failover for job %s after %s failed", pj.JobID, OfferKey(last))
			}
			acts = append(acts, a)
			if count == 1 && pj.Replicas <= 1 && o.GPUCount > need {
				k := OfferKey(o)
				inflight[k] = append(inflight[k], &slot{free: o.GPUCount - need, act: len(acts) - 1, shared: pool.Spec.SharedGPUs})
			}
			break
		}
	}

	// 4. Pools below Min.
	for _, p := range in.Pools {
		if !drivers.buys(p) || size[p.Name] >= p.Spec.Min {
			continue
		}
		var best *model.Offer
		for _, o := range in.poolOffers(p, drivers) {
			if !in.Memory.out(o, in.Now) && !in.Memory.unavailable(p.Name, o, in.Now) && (best == nil || o.PricePerHour < best.PricePerHour) {
				best = &o
			}
		}
		if best != nil {
			n := p.Spec.Min - size[p.Name]
			size[p.Name] += n
			acts = append(acts, Action{Kind: Launch, Pool: p.Name, Provider: drivers[p.Name].Name, Offer: *best, Count: n, Reason: fmt.Sprintf("pool %s below min %d", p.Name, p.Spec.Min)})
		}
	}

	// 5. Idle nodes, oldest idle first, never below Min.
	var idle []Node
	for _, n := range in.Nodes {
		p := poolByName[n.Pool]
		if n.State != model.NodeReady || n.Busy || p == nil || !drivers.buys(p) {
			continue
		}
		to := p.Spec.IdleTimeout.D()
		if to <= 0 {
			to = DefaultIdleTimeout
		}
		if in.Now.Sub(n.IdleSince) >= to {
			idle = append(idle, n)
		}
	}
	slices.SortFunc(idle, func(a, b Node) int {
		return cmp.Or(a.IdleSince.Compare(b.IdleSince), cmp.Compare(a.ID, b.ID))
	})
	for _, n := range idle {
		if size[n.Pool] <= poolByName[n.Pool].Spec.Min {
			continue
		}
		size[n.Pool]--
		acts = append(acts, Action{Kind: Terminate, Pool: n.Pool, Provider: n.Provider, NodeID: n.ID, InstanceID: n.InstanceID, Offer: n.Offer, Reason: ReasonIdle})
	}
	return acts
}

func (m *Memory) jobLast(job string) (model.Offer, bool) {
	if m == nil || m.JobLast == nil {
		return model.Offer{}, false
	}
	o, ok := m.JobLast[job]
	return o, ok
}

// failoverOrder returns the indexes of pj's offers not failing now, in
// the scheduler's order: by expected cost to finish. After a failure the
// next launch is simply the next offer by that cost — not the same zone,
// region or provider first: a nearby offer is no likelier to have capacity
// worth its price, and the scheduler ranked every offer that fits a pool
// (see Buyable), not only the first few.
func failoverOrder(pj Pending, m *Memory, now time.Time) []int {
	order := make([]int, 0, len(pj.Offers))
	for i, o := range pj.Offers {
		if !m.out(o, now) {
			order = append(order, i)
		}
	}
	return order
}

// Buyable returns the offers a launch could use now, in their order: those
// a pool whose driver launches (drivers) sells and admits (regions,
// instance types, GPU requirements, capacity types) while it has room for
// another node (size counts each pool's launching, ready and draining
// nodes), that are not backing off after a failure, and that the provider
// has not said it cannot sell (no capacity; the pool's region out of
// quota: see Unavailable). The scheduler ranks only these, so
// a candidate respects its pool's regions and limits, and after an
// insufficient-capacity failure the next candidate is the next offer by
// expected cost to finish among all that fit a pool.
func Buyable(offers []model.Offer, pools []*model.NodePool, drivers Drivers, size map[string]int, m *Memory, now time.Time) []model.Offer {
	out := make([]model.Offer, 0, len(offers))
	for _, o := range offers {
		if m.out(o, now) {
			continue
		}
		for _, p := range pools {
			if size[p.Name] < p.Spec.Max && drivers.launches(p, o) && !m.unavailable(p.Name, o, now) {
				// The pool that would launch it says how long a job
				// takes to resume on it (the scheduler's deadline rule).
				o.RestartTime = p.Spec.RestartTime
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// poolFor returns the first pool (by name) whose driver launches o, that
// admits o, has room for count more nodes and whose GPU sharing suits the
// job (Pending.suits).
func poolFor(pools []*model.NodePool, drivers Drivers, m *Memory, now time.Time, o model.Offer, size map[string]int, count int, suits func(shared bool) bool) *model.NodePool {
	for _, p := range pools {
		if suits(p.Spec.SharedGPUs) && drivers.launches(p, o) && size[p.Name]+count <= p.Spec.Max && !m.unavailable(p.Name, o, now) {
			return p
		}
	}
	return nil
}

// poolOffers lists the offers a pool's driver sells and the pool admits
// among the pending jobs' candidates, then among Input.Offers, each once.
func (in *Input) poolOffers(p *model.NodePool, drivers Drivers) []model.Offer {
	var out []model.Offer
	seen := map[string]bool{}
	add := func(o model.Offer) {
		if k := OfferKey(o); !seen[k] && drivers.launches(p, o) {
			seen[k] = true
			out = append(out, o)
		}
	}
	for _, pj := range in.Pending {
		for _, o := range pj.Offers {
			add(o)
		}
	}
	for _, o := range in.Offers {
		add(o)
	}
	return out
}

// Admits reports whether pool p's spec admits offer o: regions, instance
// types, GPU requirements, capacity types. Whether its driver sells o is
// the driver's (PoolDriver.Sells).
func Admits(p *model.NodePool, o model.Offer) bool {
	s := &p.Spec
	if !slices.Contains(s.EffectiveCapacityTypes(), o.CapacityType) {
		return false
	}
	if len(s.InstanceTypes) > 0 && !slices.Contains(s.InstanceTypes, o.InstanceType) {
		return false
	}
	r := s.Requirements
	if len(r.GPUModels) > 0 && !slices.Contains(r.GPUModels, o.GPU) ||
		r.MinGPUMemory > 0 && o.GPUMemory < r.MinGPUMemory ||
		r.GPUsPerNode > 0 && o.GPUCount != r.GPUsPerNode {
		return false
	}
	for _, pat := range s.Regions.Deny {
		if ok, _ := path.Match(pat, o.Region); ok {
			return false
		}
	}
	if len(s.Regions.Allow) == 0 {
		return true
	}
	for _, pat := range s.Regions.Allow {
		if ok, _ := path.Match(pat, o.Region); ok {
			return true
		}
	}
	return false
}
