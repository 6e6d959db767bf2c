package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/launch"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/state"
	"github.com/gpufleet/gpufleet/internal/store"
)

// ScaleConfig wires the autoscaler loop (DESIGN.md §3 Scale). The zero value
// disables it.
type ScaleConfig struct {
	// Providers are drivers whose inventory is always listed for leaks and
	// notices, pool or not (a removed pool's instances are still found).
	Providers []provider.Provider
	// Drivers gives each declared pool its driver (the provider
	// registry); a launch goes to the driver of the pool that launches.
	// Nil: a pool's driver is the one of Providers named as its
	// spec.provider. A pool launches when its driver does
	// (provider.Launches), never by its driver's name.
	Drivers PoolDrivers
	// Launches bounds the asynchronous launches (per provider, per
	// region, deadline); zero values take launch's defaults.
	Launches launch.Options
	// LaunchTimeout bounds launching → ready (autoscaler default 10m).
	LaunchTimeout time.Duration
	// StartNode, when set, brings a launched instance's node up once the
	// instance runs (live mode: an in-process agent that registers the
	// node). When nil the controller marks the node ready itself with the
	// offer's GPUs, for simulation with virtual runners.
	StartNode func(ctx context.Context, n *model.Node) error
	// StopNode, when set, is called after a node's instance is terminated
	// (by gpufleet or its provider), once its attempts have been settled.
	// It runs on its own goroutine and must not block the loop.
	StopNode func(n *model.Node)
	// DefaultPools are used while the fleet declares no NodePool (`up
	// --sim` gives one so a demo scales without a manifest); a declared
	// pool replaces them all.
	DefaultPools []*model.NodePool
}

// LaunchedGPUs is the GPU count and model of the offer a scale-loop node
// was launched from, for StartNode to declare; 0 for other nodes.
func LaunchedGPUs(n *model.Node) (count int, gpuModel string) {
	return nodeGPUCount(n), n.Labels[labelGPUModel]
}

// scaleState is the loop's memory between cycles; guarded by Controller.mu
// but for drivers and launches, which guard themselves.
type scaleState struct {
	memory autoscaler.Memory
	// inflight are the nodes whose launch is queued or running, by id.
	inflight  map[string]bool
	drivers   poolDrivers
	launches  *launch.Queue
	idleSince map[string]time.Time
	started   map[string]bool
	// deadlines are the notice deadlines of live instances, by instance
	// id: their stop time when the provider reports none.
	deadlines map[string]time.Time
	// retired are pools a fleet revision removed, by name, kept until
	// every instance launched into them is terminated; persisted under
	// metaRetired with the revision that removed them.
	retired map[string]*model.NodePool
	// memo skips Decide when it would decide nothing (decideMemo).
	memo decideMemo
	// listings are the last listings of Versioned drivers, by inventory
	// key; listed and kept count listings made and kept.
	listings     map[string]listing
	listed, kept uint64
	// unavailJSON encodes what persistUnavailableLocked writes.
	unavailJSON unavailableJSON
	// pendingIn is the last cycle's pending jobs (pendingInputLocked),
	// forgot when the memory last forgot jobs that stopped waiting.
	pendingIn pendingInput
	forgot    forgotAt
}

// pendingInput is the autoscaler's pending jobs as built from plan at
// jobGen (state.JobGen), with no node readied in the cycle.
type pendingInput struct {
	plan   *scheduler.Plan
	jobGen uint64
	list   []autoscaler.Pending
}

// forgotAt is the job and memory generations Memory.ForgetJobs last ran
// at (ok: it has run).
type forgotAt struct {
	ok             bool
	jobGen, memGen uint64
}

// forgetJobsLocked has the scale memory forget the jobs that no longer
// wait (queued, admitted or provisioning), unless neither the jobs nor
// the memory changed since it last did, when there is nothing to forget.
// Callers hold c.mu.
func (c *Controller) forgetJobsLocked() {
	f := &c.scaleSt.forgot
	if f.ok && f.jobGen == c.st.JobGen() && f.memGen == c.scaleSt.memory.Gen() {
		return
	}
	c.scaleSt.memory.ForgetJobs(func(id string) bool {
		j, ok := c.st.Job(id)
		return ok && (j.State == model.JobQueued || j.State == model.JobAdmitted || j.State == model.JobProvisioning)
	})
	*f = forgotAt{ok: true, jobGen: c.st.JobGen(), memGen: c.scaleSt.memory.Gen()}
}

// pendingInputLocked is the autoscaler's pending jobs: the last plan's
// candidates whose jobs still wait, less readied's (the jobs of nodes
// that became ready this cycle, which the next pass binds). It is what
// the last cycle built, the very list, while the plan and every job are
// unchanged and nothing was readied, so the scale memo compares it at
// once; the list is never written after it is built. Callers hold c.mu.
func (c *Controller) pendingInputLocked(readied map[string]bool) []autoscaler.Pending {
	if c.lastPlan == nil {
		return nil
	}
	p := &c.scaleSt.pendingIn
	if len(readied) == 0 && p.plan == c.lastPlan && p.jobGen == c.st.JobGen() {
		return p.list
	}
	pending := buildPendingInput(c.lastPlan, c.st, readied)
	if len(readied) == 0 {
		*p = pendingInput{plan: c.lastPlan, jobGen: c.st.JobGen(), list: pending}
	}
	return pending
}

// buildPendingInput is pendingInputLocked built afresh.
func buildPendingInput(plan *scheduler.Plan, st *state.State, readied map[string]bool) []autoscaler.Pending {
	pending := make([]autoscaler.Pending, 0, len(plan.Candidates))
	for _, cand := range plan.Candidates {
		j, ok := st.Job(cand.JobID)
		if !ok || j.State != model.JobQueued || readied[j.ID] {
			continue
		}
		pending = append(pending, autoscaler.Pending{JobID: j.ID, Replicas: max(j.Spec.Replicas, 1), GPUs: int(math.Ceil(j.Spec.Resources.GPUs)),
			Shared: j.Spec.Resources.GPUs > 0 && j.Spec.Resources.GPUs < 1, Offers: cand.Offers, Costs: cand.Costs})
	}
	return pending
}

// Node labels the scale loop sets.
const (
	labelOffer = "gpufleet.dev/offer"
)

// scale runs one autoscaler cycle:
//  1. list every provider's inventory and notices (I/O, no lock);
//  2. under the lock: apply what the providers report (launching nodes
//     now running, interrupted or vanished instances, notices → drain), and
//     build the autoscaler's input;
//  3. autoscaler.Decide (pure);
//  4. carry out terminations and launches (I/O), recording each node
//     change and its event in one batch.
func (c *Controller) scale(ctx context.Context) {
	sc := c.cfg.Scale
	if !sc.scaling() {
		return
	}
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = sc.DefaultPools
	}
	if c.scaleSt.launches == nil {
		opts := sc.Launches
		opts.Clock = c.cfg.Clock
		c.scaleSt.launches = launch.New(opts)
	}
	c.mu.Unlock()
	view := c.launchDrivers(ctx, pools, true)
	// The drivers of removed pools, listed until their instances are gone.
	retired := c.retiredDrivers(ctx)
	src := c.inventorySources(pools, view.byPool, retired)
	drivers := src.drivers
	inv := map[string][]provider.Instance{}
	var notices []provider.Notice
	for _, k := range src.keys() {
		l, ok := c.listInventory(ctx, k, drivers[k])
		if !ok {
			continue
		}
		inv[k] = l.instances
		notices = append(notices, l.notices...)
	}

	// The instances of live nodes that the providers no longer list
	// stopped on the providers' side: ask their bills when (I/O, so
	// before the lock).
	stops := c.stopTimes(ctx, drivers, inv, now, src.keyOf)

	c.mu.Lock()
	c.scaleSt.init()
	b := &store.Batch{}
	if c.scaleSt.memory.Expire(now) {
		c.persistUnavailableLocked(b, now)
	}
	var toStart []*model.Node
	running := make(map[instanceKey]provider.Instance, countInstances(inv))
	for p, list := range inv {
		for _, in := range list {
			running[instanceKey{p, in.ID}] = in
		}
	}
	noticed := map[string]provider.Notice{}
	for _, n := range notices {
		noticed[n.InstanceID] = n
	}
	active := c.st.ActiveNodes()
	// Sized by the nodes that can enter the input (an instance, or a
	// launch in flight), not every active node: owned machines never do,
	// and 552 of them made this the largest allocation of a simulated run.
	size := 0
	for _, n := range active {
		if n.Labels[model.LabelInstance] != "" || c.scaleSt.inflight[n.ID] {
			size++
		}
	}
	anodes := make([]autoscaler.Node, 0, size)
	// readied are the jobs of nodes that became ready this cycle: the next
	// pass binds them, so they are not pending here.
	readied := map[string]bool{}
	for _, n := range active {
		iid := n.Labels[model.LabelInstance]
		if n.State == model.NodeLaunching && c.scaleSt.inflight[n.ID] {
			// Its launch is still queued or running: capacity in flight
			// for its jobs, not yet an instance to check.
			anodes = append(anodes, autoscaler.Node{ID: n.ID, Pool: n.Pool, Provider: src.keyOf(n), State: n.State, Offer: nodeOffer(n),
				LaunchedAt: n.RegisteredAt, FreeGPUs: nodeGPUCount(n), ForJobs: splitJobs(n.Labels[labelForJobs])})
			continue
		}
		if n.Pool == "" || iid == "" || n.State == model.NodeTerminated {
			continue
		}
		key := src.keyOf(n)
		if _, listed := inv[key]; !listed {
			continue
		}
		in, alive := running[instanceKey{key, iid}]
		switch {
		case !alive:
			at := stops[key+"\x00"+iid]
			if nt, ok := c.scaleSt.deadlines[iid]; ok && at.IsZero() {
				at = nt
			}
			c.nodeGoneLocked(n, b, now, nodeStop{why: "instance is gone (interrupted or stopped by its provider)", at: at})
			continue
		case n.State == model.NodeLaunching && in.State == provider.StateRunning && !c.scaleSt.started[n.ID] && !selfJoining(drivers[key]):
			c.scaleSt.started[n.ID] = true
			if sc.StartNode != nil {
				toStart = append(toStart, n)
			} else {
				n = c.readyLocked(n, b, now)
				for _, j := range splitJobs(n.Labels[labelForJobs]) {
					readied[j] = true
				}
			}
		}
		if nt, ok := noticed[iid]; ok {
			// The deadline is when the instance stops, should its bill
			// not say (a provider that is no Biller).
			c.scaleSt.deadlines[iid] = nt.Deadline
			if n.State == model.NodeReady {
				n = c.noticeLocked(n, b, now, nt)
			}
		}
		busy := false
		for _, g := range n.GPUs {
			if c.st.GPUHolder(n.ID, g.Index) != "" || c.st.GPUShareUsed(n.ID, g.Index) > 0 {
				busy = true
				break
			}
		}
		if busy || n.State != model.NodeReady {
			delete(c.scaleSt.idleSince, n.ID)
		} else if _, ok := c.scaleSt.idleSince[n.ID]; !ok {
			c.scaleSt.idleSince[n.ID] = now
		}
		offer := nodeOffer(n)
		free := len(n.GPUs)
		if n.State == model.NodeLaunching {
			free = nodeGPUCount(n)
		}
		anodes = append(anodes, autoscaler.Node{ID: n.ID, Pool: n.Pool, Provider: key, InstanceID: iid, State: n.State, Offer: offer,
			LaunchedAt: n.RegisteredAt, Busy: busy, IdleSince: c.scaleSt.idleSince[n.ID], FreeGPUs: free, ForJobs: splitJobs(n.Labels[labelForJobs])})
	}
	// Instances of nodes the store knows but whose provider has no pool
	// (launched by hand, static) are owned too.
	for _, n := range c.st.UnpooledInstances() {
		anodes = append(anodes, autoscaler.Node{ID: n.ID, Provider: n.Provider, InstanceID: n.Labels[model.LabelInstance], State: model.NodeTerminated})
	}
	pending := c.pendingInputLocked(readied)
	ainv := make(map[string][]autoscaler.Instance, len(inv))
	for p, list := range inv {
		if len(list) == 0 {
			continue
		}
		l := make([]autoscaler.Instance, len(list))
		for i, in := range list {
			l[i] = autoscaler.Instance{Provider: p, ID: in.ID, Labels: in.Labels}
		}
		ainv[p] = l
	}
	c.forgetJobsLocked()
	input := autoscaler.Input{Now: now, Pools: pools, Nodes: anodes, Pending: pending, Inventory: ainv,
		Memory: &c.scaleSt.memory, LaunchTimeout: sc.LaunchTimeout, Offers: view.offers, Drivers: view.drivers}
	skip := c.scaleSt.memo.current(input, view.gen)
	memGen := c.scaleSt.memory.Gen()
	if !skip {
		// Decide reads a view of the memory: launches finishing
		// meanwhile update the original under c.mu, copying what the
		// view shares first.
		input.Memory = c.scaleSt.memory.Share()
	}
	c.mu.Unlock()

	var acts []autoscaler.Action
	if !skip {
		acts = autoscaler.Decide(input)
	}
	c.mu.Lock()
	if skip {
		c.scaleSt.memo.skipped++
	} else {
		c.scaleSt.memo.record(input, view.gen, acts)
		c.scaleSt.memo.releaseView(&c.scaleSt.memory, memGen)
		// Neither Decide nor the memo reads the view any more.
		c.scaleSt.memory.Unshare()
	}
	c.mu.Unlock()
	acts = dedupeLeaks(acts, drivers)
	acts = append(acts, retireActions(src, retired, anodes)...)

	c.mu.Lock()
	if !b.Empty() {
		c.broadcastLocked()
		c.com.submit(b)
	}
	c.mu.Unlock()
	for _, n := range toStart {
		if err := sc.StartNode(ctx, n); err != nil {
			c.cfg.Log.Warn("starting node agent", "node_id", n.ID, "err", err)
		}
	}
	// Launches are recorded in the order decided, then queued: their
	// outcomes come later, on the queue's goroutines.
	var launches []launch.Request
	for _, a := range acts {
		switch a.Kind {
		case autoscaler.Terminate:
			c.terminate(ctx, drivers[a.Provider], a, now)
		case autoscaler.Launch:
			for range a.Count {
				if r, ok := c.launch(view.byPool[a.Pool], a, now); ok {
					launches = append(launches, r)
				}
			}
		}
	}
	c.mu.Lock()
	q := c.scaleSt.launches
	c.mu.Unlock()
	for _, r := range launches {
		q.Submit(ctx, r)
	}
	c.trigger()
}

const labelForJobs = "gpufleet.dev/for-jobs"

// instanceKey is an instance by inventory key and instance id.
type instanceKey struct{ key, id string }

func countInstances(inv map[string][]provider.Instance) int {
	n := 0
	for _, l := range inv {
		n += len(l)
	}
	return n
}

func splitJobs(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func joinJobs(js []string) string {
	s := ""
	for i, j := range js {
		if i > 0 {
			s += ","
		}
		s += j
	}
	return s
}

// poolRestartLocked is the restart time a node of pool launched from o
// carries for the scheduler's deadline rule: the pool's restartTime, else
// the one the offer came with. Callers hold c.mu.
func (c *Controller) poolRestartLocked(pool string, o model.Offer) model.Duration {
	for _, p := range c.fleet.pools {
		if p.Name == pool && p.Spec.RestartTime > 0 {
			return p.Spec.RestartTime
		}
	}
	return o.RestartTime
}

// poolSharesGPUsLocked reports whether the declared pool named pool (or,
// without a declared fleet, the default pool) marks its GPUs shareable:
// its nodes then carry Node.SharedGPUs, which is what the scheduler
// packs GPU shares by. Callers hold c.mu.
func (c *Controller) poolSharesGPUsLocked(pool string) bool {
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = c.cfg.Scale.DefaultPools
	}
	for _, p := range pools {
		if p.Name == pool {
			return p.Spec.SharedGPUs
		}
	}
	return false
}

// launch prepares buying one instance for a without waiting for the
// provider: the node is recorded launching (durable before the provider is
// called, so its instance is never mistaken for a leak and a crash leaves
// a record of it), and the returned request, once queued, calls the
// provider (bounded per provider and region, under a deadline) and
// records the outcome (launchDone).
func (c *Controller) launch(p provider.Provider, a autoscaler.Action, now time.Time) (launch.Request, bool) {
	if p == nil {
		return launch.Request{}, false
	}
	o := a.Offer
	c.mu.Lock()
	n := &model.Node{ID: c.cfg.NewID("n-"), Name: o.InstanceType, Provider: p.Name(), Pool: a.Pool, State: model.NodeLaunching,
		Region: o.Region, Zone: o.Zone, InstanceType: o.InstanceType, CapacityType: o.CapacityType, PricePerHour: o.PricePerHour,
		CPU: o.VCPUs, Memory: o.Memory, RegisteredAt: now, Version: 1, InterruptionRate: o.InterruptionRate, RestartTime: c.poolRestartLocked(a.Pool, o),
		SharedGPUs: c.poolSharesGPUsLocked(a.Pool),
		Labels:     map[string]string{labelOffer: o.Provider, labelForJobs: joinJobs(a.Jobs), labelGPUs: fmt.Sprint(o.GPUCount), labelGPUModel: o.GPU}}
	c.st.PutNode(n)
	c.lastSeen[n.ID] = now
	c.scaleSt.init()
	c.scaleSt.inflight[n.ID] = true
	b := &store.Batch{Nodes: []*model.Node{n}}
	if a.Failover {
		c.recordLocked(b, model.Event{Kind: model.EventFailover, Object: "node/" + n.ID, Node: n.ID, Provider: o.Provider, Region: o.Region,
			Message: a.Reason, Fields: map[string]string{"offer": autoscaler.OfferKey(o), "failed": a.FailedOffer, "jobs": joinJobs(a.Jobs)}})
	}
	cm := c.com.submit(b)
	c.mu.Unlock()
	return launch.Request{Provider: p,
		Launch: provider.LaunchRequest{Offer: o, Token: n.ID, Labels: map[string]string{autoscaler.LabelNode: n.ID, "gpufleet.dev/pool": a.Pool}},
		Before: cm.wait,
		Done:   func(in provider.Instance, err error) { c.launchDone(n.ID, a, in, err, now) }}, true
}

// launchDone records a launch's outcome on node id: the instance id, or
// the node terminated with a launch-failed event. The error's kind says
// what is remembered (Karpenter's rules): insufficient capacity marks the
// offer unavailable for autoscaler.CapacityTTL, a quota marks the pool's
// provider region for autoscaler.QuotaTTL (both persisted), anything else
// (transient past the deadline, an unknown offer) backs the offer off.
// Either way the next cycle fails over to the job's next offer by cost.
func (c *Controller) launchDone(id string, a autoscaler.Action, in provider.Instance, err error, launched time.Time) {
	o := a.Offer
	c.mu.Lock()
	defer c.trigger()
	defer c.mu.Unlock()
	delete(c.scaleSt.inflight, id)
	cur, ok := c.st.Node(id)
	if !ok {
		return
	}
	now := c.cfg.Clock.Now()
	n := cur.Clone()
	n.Version++
	b := &store.Batch{Nodes: []*model.Node{n}}
	if err != nil {
		job := ""
		if len(a.Jobs) > 0 {
			job = a.Jobs[0]
		}
		fields := map[string]string{"offer": autoscaler.OfferKey(o)}
		kind := ""
		switch {
		case provider.IsInsufficientCapacity(err):
			kind = autoscaler.UnavailableCapacity
			c.scaleSt.memory.Mark(autoscaler.Unavailable{Kind: kind, Pool: a.Pool, Offer: o, Reason: err.Error(), Since: now, Until: now.Add(autoscaler.CapacityTTL)})
		case provider.IsQuotaExceeded(err):
			kind = autoscaler.UnavailableQuota
			c.scaleSt.memory.Mark(autoscaler.Unavailable{Kind: kind, Pool: a.Pool, Offer: o, Reason: err.Error(), Since: now, Until: now.Add(autoscaler.QuotaTTL)})
		}
		if kind != "" {
			c.scaleSt.memory.Remember(job, o)
			c.persistUnavailableLocked(b, now)
			fields["unavailable"] = kind
		} else {
			fields["retryAfter"] = c.scaleSt.memory.Fail(o, job, now).Format(time.RFC3339)
		}
		n.State = model.NodeTerminated
		c.recordLocked(b, model.Event{Kind: model.EventLaunchFail, Object: "node/" + n.ID, Node: n.ID, Job: job, Provider: o.Provider, Region: o.Region,
			Message: fmt.Sprintf("launching %s in %s %s: %v", o.InstanceType, o.Region, o.Zone, err), Fields: fields})
	} else {
		c.scaleSt.memory.Succeed(o)
		n.Labels[model.LabelInstance] = in.ID
		n.LaunchedAt = cmpTime(in.LaunchedAt, launched)
		c.recordLocked(b, model.Event{Kind: model.EventLaunch, Object: "node/" + n.ID, Node: n.ID, Provider: o.Provider, Region: o.Region,
			Message: fmt.Sprintf("launched %s %s in %s %s at $%.2f/h for %s", o.CapacityType, o.InstanceType, o.Region, o.Zone, o.PricePerHour, a.Reason),
			Fields: map[string]string{"offer": autoscaler.OfferKey(o), "instance": in.ID, "pool": a.Pool, "jobs": joinJobs(a.Jobs),
				FieldLaunchedAt: cmpTime(in.LaunchedAt, launched).Format(time.RFC3339Nano)}})
	}
	c.st.PutNode(n)
	c.broadcastLocked()
	c.com.submit(b)
}

// metaUnavailable is the store's meta key holding the unavailable offers
// and regions (JSON), so a restart keeps them until their TTL.
const metaUnavailable = "scale.unavailable"

// persistUnavailableLocked writes the unavailability in force at now into
// b, unless it is what the last write wrote. Callers hold c.mu.
func (c *Controller) persistUnavailableLocked(b *store.Batch, now time.Time) {
	data := c.scaleSt.unavailJSON.encode(&c.scaleSt.memory, now)
	if data == c.scaleSt.unavailJSON.last {
		return
	}
	c.scaleSt.unavailJSON.last = data
	if b.Meta == nil {
		b.Meta = map[string]string{}
	}
	b.Meta[metaUnavailable] = data
}

// unavailableJSON encodes the unavailability in force, as json.Marshal of
// Memory.UnavailableNow would, keeping each entry's encoding so that a
// write encodes only the entries new since the last (launch failures mark
// one offer at a time, and each persists the whole list).
type unavailableJSON struct {
	enc  map[string]encodedUnavailable // by key
	last string                        // what the last write wrote
	in   []unavailableEntry            // encode's buffer
}

type unavailableEntry struct {
	key string
	u   autoscaler.Unavailable
}

type encodedUnavailable struct {
	u    autoscaler.Unavailable
	data []byte
}

func (e *unavailableJSON) encode(m *autoscaler.Memory, now time.Time) string {
	in := e.in[:0]
	for k, u := range m.Unavailable {
		if u.Until.After(now) {
			in = append(in, unavailableEntry{k, u})
		}
	}
	e.in = in
	// UnavailableNow's order: by kind, then key (the map's keys are the
	// entries' keys).
	slices.SortFunc(in, func(a, b unavailableEntry) int {
		return cmp.Or(cmp.Compare(a.u.Kind, b.u.Kind), cmp.Compare(a.key, b.key))
	})
	if e.enc == nil || len(e.enc) > 2*len(in)+64 {
		e.enc = make(map[string]encodedUnavailable, len(in))
	}
	if len(in) == 0 {
		return "null" // json.Marshal of a nil slice
	}
	size := len(in) + 1 // brackets and commas
	for _, x := range in {
		enc, ok := e.enc[x.key]
		if !ok || enc.u != x.u {
			data, err := json.Marshal(x.u)
			if err != nil {
				panic(err) // plain data
			}
			enc = encodedUnavailable{x.u, data}
			e.enc[x.key] = enc
		}
		size += len(enc.data)
	}
	var buf strings.Builder
	buf.Grow(size)
	buf.WriteByte('[')
	for i, x := range in {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(e.enc[x.key].data)
	}
	buf.WriteByte(']')
	return buf.String()
}

// loadUnavailable restores the persisted unavailability (New).
func (c *Controller) loadUnavailable(meta map[string]string) {
	v, ok := meta[metaUnavailable]
	if !ok {
		return
	}
	var us []autoscaler.Unavailable
	if err := json.Unmarshal([]byte(v), &us); err != nil {
		c.cfg.Log.Warn("ignoring unreadable unavailable offers", "err", err)
		return
	}
	for _, u := range us {
		c.scaleSt.memory.Mark(u)
	}
}

// Unavailable lists the offers and pool regions providers cannot sell now
// (`gpufleet offers --unavailable`, explain).
func (c *Controller) Unavailable() []autoscaler.Unavailable {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scaleSt.memory.UnavailableNow(c.cfg.Clock.Now())
}

// WaitLaunches returns once every queued launch is done (tests, shutdown).
func (c *Controller) WaitLaunches() {
	c.mu.Lock()
	q := c.scaleSt.launches
	c.mu.Unlock()
	if q != nil {
		q.Wait()
	}
}

func (s *scaleState) init() {
	if s.idleSince == nil {
		s.idleSince, s.started, s.deadlines = map[string]time.Time{}, map[string]bool{}, map[string]time.Time{}
	}
	if s.inflight == nil {
		s.inflight = map[string]bool{}
	}
}

// nodeOffer is the offer a scale-loop node was launched from, by identity.
func nodeOffer(n *model.Node) model.Offer {
	return model.Offer{Provider: n.Labels[labelOffer], Region: n.Region, Zone: n.Zone, InstanceType: n.InstanceType, CapacityType: n.CapacityType}
}

// terminate carries out a Terminate action: the instance stops billing,
// then the node (if any) ends terminated. One event records it, with the
// provider's stop time.
func (c *Controller) terminate(ctx context.Context, p provider.Provider, a autoscaler.Action, now time.Time) {
	if p == nil {
		return
	}
	err := p.Terminate(ctx, a.InstanceID)
	var at time.Time
	if err == nil {
		at = c.stopTimes(ctx, map[string]provider.Provider{a.Provider: p}, nil, now, nil, a.InstanceID)[a.Provider+"\x00"+a.InstanceID]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &store.Batch{}
	if a.Reason == autoscaler.ReasonLaunchTimeout {
		job := ""
		if len(a.Jobs) > 0 {
			job = a.Jobs[0]
		}
		if n, ok := c.st.Node(a.NodeID); ok {
			c.scaleSt.memory.Fail(nodeOffer(n), job, now)
		}
	}
	if n, ok := c.st.Node(a.NodeID); ok && err == nil && n.State != model.NodeTerminated {
		c.nodeGoneLocked(n, b, now, nodeStop{why: "terminated: " + a.Reason, reason: a.Reason, at: at})
	} else {
		kind := model.EventTerminate
		if a.Reason == autoscaler.ReasonLeak {
			kind = model.EventLeak
		}
		// The driver's name, not its inventory key: events speak of
		// providers.
		name := p.Name()
		msg := fmt.Sprintf("terminated instance %s/%s: %s", name, a.InstanceID, a.Reason)
		fields := map[string]string{"instance": a.InstanceID, "reason": a.Reason}
		if a.Pool != "" {
			fields["pool"] = a.Pool
		}
		if err != nil {
			msg = fmt.Sprintf("terminating instance %s/%s (%s): %v", name, a.InstanceID, a.Reason, err)
		} else {
			fields[FieldStoppedAt] = cmpTime(at, now).Format(time.RFC3339Nano)
		}
		obj := "instance/" + name + "/" + a.InstanceID
		if a.NodeID != "" {
			obj = "node/" + a.NodeID
		}
		c.recordLocked(b, model.Event{Kind: kind, Object: obj, Node: a.NodeID, Provider: a.Offer.Provider, Region: a.Offer.Region, Message: msg, Fields: fields})
	}
	delete(c.scaleSt.deadlines, a.InstanceID)
	c.broadcastLocked()
	c.com.submit(b)
}

// Event fields that date an instance's bill: the launch event's
// launchedAt and the terminate (or leak) event's stoppedAt are the
// provider's own times (RFC 3339 with nanoseconds), so the node-time the
// events add up to is what the provider bills.
const (
	FieldLaunchedAt = "launchedAt"
	FieldStoppedAt  = "stoppedAt"
)

// stopTimes returns when the providers stopped instances (inventory key
// and instance id joined by NUL → time), from the bills of the drivers
// (by inventory key) that are a provider.Biller. It asks only about the
// given ids, or, when none are given, about the instances of live nodes
// missing from inv (keyOf gives a node's key; an instance whose key is
// missing from inv is not asked about). Without a bill entry an instance
// has no time here, and the caller falls back to a notice's deadline or
// now.
func (c *Controller) stopTimes(ctx context.Context, drivers map[string]provider.Provider, inv map[string][]provider.Instance, now time.Time, keyOf func(*model.Node) string, ids ...string) map[string]time.Time {
	billers := false
	for _, d := range drivers {
		_, ok := d.(provider.Biller)
		billers = billers || ok
	}
	if !billers {
		return nil
	}
	want := map[string][]string{} // provider → instance ids
	if len(ids) > 0 {
		for p := range drivers {
			want[p] = ids
		}
	} else {
		listed := make(map[instanceKey]bool, countInstances(inv))
		for p, list := range inv {
			for _, in := range list {
				listed[instanceKey{p, in.ID}] = true
			}
		}
		c.mu.Lock()
		for _, n := range c.st.ActiveNodes() {
			iid := n.Labels[model.LabelInstance]
			if n.Pool == "" || iid == "" || n.State == model.NodeTerminated {
				continue
			}
			k := keyOf(n)
			if _, ok := inv[k]; ok && !listed[instanceKey{k, iid}] {
				want[k] = append(want[k], iid)
			}
		}
		c.mu.Unlock()
	}
	out := map[string]time.Time{}
	for p, ids := range want {
		bl, ok := drivers[p].(provider.Biller)
		if !ok || len(ids) == 0 {
			continue
		}
		usage, err := bl.Usage(ctx)
		if err != nil {
			c.cfg.Log.Warn("reading provider bill for stop times", "provider", p, "err", err)
			continue
		}
		need := map[string]bool{}
		for _, id := range ids {
			need[id] = true
		}
		for _, u := range usage {
			if need[u.InstanceID] && !u.Running {
				out[p+"\x00"+u.InstanceID] = u.End
			}
		}
	}
	return out
}

// cmpTime is t, or def when t is zero.
func cmpTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// Labels recording a launched node's GPUs until it is ready.
const (
	labelGPUs     = "gpufleet.dev/gpus"
	labelGPUModel = "gpufleet.dev/gpu-model"
)

// readyLocked marks a launching node ready with the offer's GPUs (virtual
// runners: no agent registers it).
func (c *Controller) readyLocked(n *model.Node, b *store.Batch, now time.Time) *model.Node {
	n = n.Clone()
	n.Version++
	n.State = model.NodeReady
	n.LastHeartbeat = now
	n.GPUSource = "fake"
	count := nodeGPUCount(n)
	n.GPUs = make([]model.GPU, count)
	for i := range n.GPUs {
		n.GPUs[i] = model.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n.ID, i), Model: n.Labels[labelGPUModel], NVLinkGroup: 0}
	}
	c.st.PutNode(n)
	c.lastSeen[n.ID] = now
	b.Nodes = append(b.Nodes, n)
	c.recordLocked(b, model.Event{Kind: model.EventNodeReady, Object: "node/" + n.ID, Node: n.ID, Provider: n.Labels[labelOffer], Region: n.Region,
		Message: fmt.Sprintf("instance %s is running", n.Labels[model.LabelInstance])})
	return n
}

// noticeLocked handles a notice: the node takes no new work, and each live
// attempt on it is stopped through the checkpoint signal and grace period,
// ending preempted (a gang stops on every node).
func (c *Controller) noticeLocked(n *model.Node, b *store.Batch, now time.Time, nt provider.Notice) *model.Node {
	n = n.Clone()
	n.Version++
	n.State = model.NodeDraining
	c.st.PutNode(n)
	b.Nodes = append(b.Nodes, n)
	c.nodeGen.bump(n.ID)
	c.recordLocked(b, model.Event{Kind: model.EventNotice, Object: "node/" + n.ID, Node: n.ID, Provider: n.Labels[labelOffer], Region: n.Region,
		Message: fmt.Sprintf("%s notice: instance %s stops at %s", nt.Reason, nt.InstanceID, nt.Deadline.Format(time.RFC3339)),
		Fields:  map[string]string{"deadline": nt.Deadline.Format(time.RFC3339), "reason": nt.Reason}})
	c.recordLocked(b, model.Event{Kind: model.EventDrain, Object: "node/" + n.ID, Node: n.ID, Message: "draining: live attempts get their checkpoint signal"})
	for _, a := range c.st.LiveAttempts() {
		on := false
		for _, r := range a.Replicas {
			on = on || r.NodeID == n.ID && !r.State.Terminal()
		}
		if !on || a.Stop {
			continue
		}
		a = a.Clone()
		a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, fmt.Sprintf("node %s got a %s notice", n.ID, nt.Reason)
		a.Version++
		c.st.PutAttempt(a)
		b.Attempts = append(b.Attempts, a)
		c.bumpNodesLocked(a)
	}
	return n
}

// nodeStop says why a node's instance is gone (why: the event's message;
// reason: the autoscaler's, when it terminated it) and when it stopped
// (zero: now).
type nodeStop struct {
	why, reason string
	at          time.Time
}

// nodeGoneLocked ends a node whose instance is gone: its unfinished
// replicas are lost (an attempt already stopping for a notice ends
// preempted) and their jobs requeue.
func (c *Controller) nodeGoneLocked(n *model.Node, b *store.Batch, now time.Time, stop nodeStop) {
	if n.State == model.NodeTerminated {
		return
	}
	why := stop.why
	n = n.Clone()
	n.Version++
	n.State = model.NodeTerminated
	n.StoppedAt = cmpTime(stop.at, now)
	c.st.PutNode(n)
	b.Nodes = append(b.Nodes, n)
	delete(c.scaleSt.idleSince, n.ID)
	delete(c.scaleSt.deadlines, n.Labels[model.LabelInstance])
	c.forgetAgentLocked(n.ID)
	fields := map[string]string{"instance": n.Labels[model.LabelInstance], FieldStoppedAt: n.StoppedAt.Format(time.RFC3339Nano)}
	if stop.reason != "" {
		fields["reason"] = stop.reason
	}
	c.recordLocked(b, model.Event{Kind: model.EventTerminate, Object: "node/" + n.ID, Node: n.ID, Provider: n.Labels[labelOffer], Region: n.Region, Message: why,
		Fields: fields})
	for _, a := range c.st.LiveAttempts() {
		changed := false
		a = a.Clone()
		for i, r := range a.Replicas {
			if r.NodeID == n.ID && !r.State.Terminal() {
				a.Replicas[i].State, a.Replicas[i].Reason = model.AttemptLost, model.ReasonNodeLost
				changed = true
			}
		}
		if changed {
			if !a.Stop {
				a.Stop, a.StopState, a.StopWhy = true, model.AttemptPreempted, why
			}
			a.Version++
			c.settleLocked(a, b, now)
		}
	}
	if c.cfg.Scale.StopNode != nil {
		go c.cfg.Scale.StopNode(n)
	}
}

// nodeGPUCount is the GPUs a launched node's offer has.
func nodeGPUCount(n *model.Node) int {
	if len(n.GPUs) > 0 {
		return len(n.GPUs)
	}
	k, _ := strconv.Atoi(n.Labels[labelGPUs])
	return k
}

// InterruptNode asks the provider of node id to reclaim its instance with
// its usual notice, as a drill or demo (`gpufleet nodes interrupt`). The
// next scale cycle sees the notice and drains the node. Errors: ErrNotFound
// for an unknown node or one without an instance; an error when its
// provider cannot interrupt.
func (c *Controller) InterruptNode(ctx context.Context, id string) (provider.Notice, error) {
	c.mu.Lock()
	n, ok := c.st.Node(id)
	c.mu.Unlock()
	if !ok || n.Labels[model.LabelInstance] == "" || n.State == model.NodeTerminated {
		return provider.Notice{}, fmt.Errorf("node %s has no live instance: %w", id, ErrNotFound)
	}
	if p := c.nodeDriver(n); p != nil {
		ip, ok := p.(provider.Interrupter)
		if !ok {
			return provider.Notice{}, fmt.Errorf("provider %s cannot interrupt instances", p.Name())
		}
		nt, err := ip.Interrupt(ctx, n.Labels[model.LabelInstance])
		if err != nil {
			return provider.Notice{}, fmt.Errorf("interrupting node %s: %w", id, err)
		}
		// Drain now rather than at the next scale cycle: a simulation's
		// scaled notice lead can be shorter than the cycle.
		c.mu.Lock()
		var cm *commit
		if cur, ok := c.st.Node(id); ok && cur.State == model.NodeReady {
			b := &store.Batch{}
			c.noticeLocked(cur, b, c.cfg.Clock.Now(), nt)
			c.broadcastLocked()
			cm = c.com.submit(b)
		}
		c.mu.Unlock()
		if cm != nil {
			if err := cm.wait(ctx); err != nil {
				return nt, fmt.Errorf("recording the notice of node %s: %w", id, err)
			}
		}
		c.trigger()
		return nt, nil
	}
	return provider.Notice{}, fmt.Errorf("node %s: provider %s is not configured: %w", id, n.Provider, ErrNotFound)
}

// selfJoining reports whether p's instances register their nodes
// themselves (provider.SelfJoining): the loop then waits for the agent.
func selfJoining(p provider.Provider) bool {
	_, ok := p.(provider.SelfJoining)
	return ok
}

// ReasonPoolRemoved is the reason of terminating a removed pool's
// instances.
const ReasonPoolRemoved = "pool removed"

// metaRetired is the store's meta key holding the removed pools whose
// instances are still to be terminated (JSON, by name), so a restart
// before they are all gone still terminates them.
const metaRetired = "scale.retired"

// retirePoolsLocked remembers the pools of old that cur no longer
// declares, so the scale loop terminates the instances launched into them,
// and writes what it remembers into b, the batch that records the fleet
// revision removing them: the revision and the retirement are durable
// together. Callers hold c.mu.
func (c *Controller) retirePoolsLocked(b *store.Batch, old, cur []*model.NodePool) {
	changed := false
	for _, p := range old {
		if slices.ContainsFunc(cur, func(q *model.NodePool) bool { return q.Name == p.Name }) {
			continue
		}
		if c.scaleSt.retired == nil {
			c.scaleSt.retired = map[string]*model.NodePool{}
		}
		c.scaleSt.retired[p.Name] = p
		changed = true
	}
	for _, p := range cur {
		if _, ok := c.scaleSt.retired[p.Name]; ok {
			delete(c.scaleSt.retired, p.Name) // declared again
			changed = true
		}
	}
	if changed {
		c.persistRetiredLocked(b)
	}
}

// persistRetiredLocked writes the retired pools into b. Callers hold c.mu.
func (c *Controller) persistRetiredLocked(b *store.Batch) {
	pools := make([]*model.NodePool, 0, len(c.scaleSt.retired))
	for _, p := range c.scaleSt.retired {
		pools = append(pools, p)
	}
	slices.SortFunc(pools, func(a, b *model.NodePool) int { return strings.Compare(a.Name, b.Name) })
	data, err := json.Marshal(pools)
	if err != nil {
		panic(err) // plain data
	}
	if b.Meta == nil {
		b.Meta = map[string]string{}
	}
	b.Meta[metaRetired] = string(data)
}

// loadRetired restores the retired pools (New).
func (c *Controller) loadRetired(meta map[string]string) {
	v, ok := meta[metaRetired]
	if !ok {
		return
	}
	var pools []*model.NodePool
	if err := json.Unmarshal([]byte(v), &pools); err != nil {
		c.cfg.Log.Warn("ignoring unreadable retired pools", "err", err)
		return
	}
	for _, p := range pools {
		if c.scaleSt.retired == nil {
			c.scaleSt.retired = map[string]*model.NodePool{}
		}
		c.scaleSt.retired[p.Name] = p
	}
}

// retiredDrivers returns the launching drivers of removed pools, by pool
// name, forgetting (durably) the pools none of whose nodes is live any
// more.
func (c *Controller) retiredDrivers(ctx context.Context) map[string]provider.Provider {
	c.mu.Lock()
	live := map[string]bool{}
	for _, n := range c.st.ActiveNodes() {
		if n.State != model.NodeTerminated && n.Pool != "" {
			live[n.Pool] = true
		}
	}
	var pools []*model.NodePool
	forgot := false
	for name, p := range c.scaleSt.retired {
		if !live[name] {
			delete(c.scaleSt.retired, name)
			forgot = true
			continue
		}
		pools = append(pools, p)
	}
	var cm *commit
	if forgot {
		b := &store.Batch{}
		c.persistRetiredLocked(b)
		cm = c.com.submit(b)
	}
	c.mu.Unlock()
	if cm != nil {
		if err := cm.wait(ctx); err != nil {
			c.cfg.Log.Warn("recording the retired pools", "err", err)
		}
	}
	out := map[string]provider.Provider{}
	for _, p := range pools {
		if d := c.driverFor(p); d != nil && provider.Launches(d) {
			out[p.Name] = d
		}
	}
	return out
}

// retireActions terminates the instances of nodes in removed pools, each
// through its own pool's driver.
func retireActions(src sources, retired map[string]provider.Provider, nodes []autoscaler.Node) []autoscaler.Action {
	var acts []autoscaler.Action
	for _, n := range nodes {
		if retired[n.Pool] != nil && n.InstanceID != "" && n.State != model.NodeTerminated && n.Provider == src.pools[n.Pool] {
			acts = append(acts, autoscaler.Action{Kind: autoscaler.Terminate, Pool: n.Pool, Provider: n.Provider, NodeID: n.ID, InstanceID: n.InstanceID, Offer: n.Offer, Reason: ReasonPoolRemoved})
		}
	}
	return acts
}

// sources are the drivers one scale cycle lists, each once, under an
// inventory key: a wired driver (ScaleConfig.Providers) under its name, a
// pool's driver that is not one of them under "pool/" and the pool's
// name. Keys, not driver names, tell inventories apart, so two pools of
// one driver (two aws pools in different regions or subnets) each list,
// keep and terminate only their own instances.
type sources struct {
	drivers map[string]provider.Provider // by key
	pools   map[string]string            // pool name → key
}

// keyOf is the inventory key of node n: its pool's driver's, else (a
// node of no launching pool) its provider's name.
func (s sources) keyOf(n *model.Node) string {
	if k, ok := s.pools[n.Pool]; ok {
		return k
	}
	return n.Provider
}

// keys lists the keys, sorted.
func (s sources) keys() []string {
	out := make([]string, 0, len(s.drivers))
	for k := range s.drivers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// inventorySources keys the wired drivers and the drivers of the
// declared (byPool) and removed (retired) pools.
func (c *Controller) inventorySources(pools []*model.NodePool, byPool, retired map[string]provider.Provider) sources {
	s := sources{drivers: map[string]provider.Provider{}, pools: map[string]string{}}
	for _, p := range c.cfg.Scale.Providers {
		if _, dup := s.drivers[p.Name()]; !dup {
			s.drivers[p.Name()] = p
		}
	}
	add := func(pool string, d provider.Provider) {
		for k, e := range s.drivers {
			if sameDriver(e, d) {
				s.pools[pool] = k
				return
			}
		}
		k := "pool/" + pool
		s.drivers[k] = d
		s.pools[pool] = k
	}
	for _, p := range pools {
		if d := byPool[p.Name]; d != nil {
			add(p.Name, d)
		}
	}
	names := make([]string, 0, len(retired))
	for name := range retired {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		add(name, retired[name])
	}
	return s
}

// sameDriver reports whether a and b are one driver value (a factory that
// returns a wired driver for its pools shares that driver's inventory).
func sameDriver(a, b provider.Provider) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// dedupeLeaks keeps one termination per instance among the leaks Decide
// found: drivers that share an inventory (the views a simulator gives each
// pool) list the same instance under each of their keys.
func dedupeLeaks(acts []autoscaler.Action, drivers map[string]provider.Provider) []autoscaler.Action {
	seen := map[string]bool{}
	out := acts[:0]
	for _, a := range acts {
		if a.Kind == autoscaler.Terminate && a.Reason == autoscaler.ReasonLeak {
			k := drivers[a.Provider].Name() + "\x00" + a.InstanceID
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		out = append(out, a)
	}
	return out
}
