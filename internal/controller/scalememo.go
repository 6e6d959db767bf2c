package controller

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// decideMemo lets a scale cycle skip autoscaler.Decide when the answer is
// known to be nothing: the last cycle's Decide decided nothing, and this
// cycle's input is the same but for a later Now, before that input's
// NextChange. Decide is a pure function of its input, and the clock
// changes its answer only at NextChange's times, so the skipped call
// would have decided nothing again. Everything Decide reads is compared
// by value (pools, nodes, pending jobs with their candidate offers and
// costs, inventory, offers, the memory's back-offs, failovers and
// unavailability, the launch timeout) except the pools' drivers, whose
// Sells functions cannot be compared: the launch view's generation
// (launchView.gen) vouches for them. Guarded by Controller.mu.
type decideMemo struct {
	ok    bool
	in    autoscaler.Input
	pools []model.NodePool // by value: in.Pools' pointers are shared
	view  uint64
	until time.Time // in.NextChange(); zero: never
	// mem, when set, is the memory whose view (Share) in.Memory was,
	// at generation memGen; in.Memory is then dropped (the view would
	// keep the memory copying on write) and the memory compares by
	// generation: the same memory, unwritten since.
	mem    *autoscaler.Memory
	memGen uint64
	// decided counts the cycles that called Decide, skipped those that
	// did not.
	decided, skipped uint64
}

// current reports whether Decide(in), with drivers of launch view
// generation view, would decide nothing because the last call did.
func (m *decideMemo) current(in autoscaler.Input, view uint64) bool {
	p := &m.in
	return m.ok && view == m.view && !in.Now.Before(p.Now) && (m.until.IsZero() || in.Now.Before(m.until)) &&
		in.LaunchTimeout == p.LaunchTimeout && samePools(in.Pools, m.pools) &&
		slices.EqualFunc(in.Nodes, p.Nodes, sameNode) && (sameArray(in.Pending, p.Pending) || slices.EqualFunc(in.Pending, p.Pending, samePending)) &&
		sameInventory(in.Inventory, p.Inventory) && sameOffers(in.Offers, p.Offers) && m.sameMemory(in.Memory)
}

func (m *decideMemo) sameMemory(in *autoscaler.Memory) bool {
	if m.mem != nil {
		return in == m.mem && in.Gen() == m.memGen
	}
	return sameMemory(in, m.in.Memory)
}

// releaseView has the memo compare the memory by generation (gen: mem's
// when its view, the recorded input's, was taken) and drop the view.
func (m *decideMemo) releaseView(mem *autoscaler.Memory, gen uint64) {
	if m.ok {
		m.in.Memory, m.mem, m.memGen = nil, mem, gen
	}
}

// record remembers a Decide call's input and whether it decided anything.
// in must not change afterwards (the scale cycle builds a fresh one each
// time).
func (m *decideMemo) record(in autoscaler.Input, view uint64, acts []autoscaler.Action) {
	m.decided++
	m.ok = len(acts) == 0
	m.mem = nil
	if !m.ok {
		m.in, m.pools = autoscaler.Input{}, nil
		return
	}
	m.in, m.view, m.until = in, view, in.NextChange()
	m.pools = m.pools[:0]
	for _, p := range in.Pools {
		m.pools = append(m.pools, *p)
	}
}

func samePools(a []*model.NodePool, b []model.NodePool) bool {
	return slices.EqualFunc(a, b, func(p *model.NodePool, q model.NodePool) bool {
		return p.Name == q.Name && p.Revision == q.Revision && reflect.DeepEqual(p.Spec, q.Spec)
	})
}

func sameNode(a, b autoscaler.Node) bool {
	return a.ID == b.ID && a.Pool == b.Pool && a.Provider == b.Provider && a.InstanceID == b.InstanceID && a.State == b.State &&
		a.Offer == b.Offer && a.LaunchedAt.Equal(b.LaunchedAt) && a.Busy == b.Busy && a.IdleSince.Equal(b.IdleSince) &&
		a.FreeGPUs == b.FreeGPUs && slices.Equal(a.ForJobs, b.ForJobs)
}

func samePending(a, b autoscaler.Pending) bool {
	return a.JobID == b.JobID && a.Replicas == b.Replicas && a.GPUs == b.GPUs && a.Shared == b.Shared &&
		sameOffers(a.Offers, b.Offers) && (sameArray(a.Costs, b.Costs) || slices.Equal(a.Costs, b.Costs))
}

// sameOffers compares offer lists, at once when both are one array (a
// plan's candidates carried over, a cached launch view).
func sameOffers(a, b []model.Offer) bool {
	return sameArray(a, b) || slices.Equal(a, b)
}

// sameArray reports whether a and b are the same elements of one array.
func sameArray[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func sameInventory(a, b map[string][]autoscaler.Instance) bool {
	return maps.EqualFunc(a, b, func(x, y []autoscaler.Instance) bool {
		return slices.EqualFunc(x, y, func(i, j autoscaler.Instance) bool {
			return i.Provider == j.Provider && i.ID == j.ID && maps.Equal(i.Labels, j.Labels)
		})
	})
}

// sameMemory compares what Decide reads of the memory: back-offs, the
// jobs' last failed offers, unavailability (not the failure counts).
func sameMemory(a, b *autoscaler.Memory) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameMap(a.Until, b.Until) && sameMap(a.JobLast, b.JobLast) && sameMap(a.Unavailable, b.Unavailable)
}

// sameMap is maps.Equal, at once when a and b are one map (a memory and
// the view of it that Share gave the last cycle, unwritten since).
func sameMap[K, V comparable](a, b map[K]V) bool {
	return (a != nil && b != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()) || maps.Equal(a, b)
}

// ScaleStats counts scale cycles since the controller started.
type ScaleStats struct {
	// Decided cycles called autoscaler.Decide; Skipped ones knew it
	// would decide nothing (the same input as a cycle that decided
	// nothing, before its next timer) and did not.
	Decided, Skipped uint64
	// Listed counts the provider listings (inventory, notices) made;
	// Kept those a Versioned driver's unchanged version let the cycle
	// keep from the last one.
	Listed, Kept uint64
}

// ScaleStats returns the scale cycle counts (`gpufleet simulate` reports
// them).
func (c *Controller) ScaleStats() ScaleStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.scaleSt.memo
	return ScaleStats{Decided: m.decided, Skipped: m.skipped, Listed: c.scaleSt.listed, Kept: c.scaleSt.kept}
}

// listing is what one inventory key's driver listed, at its version.
type listing struct {
	driver    provider.Provider // the driver that listed it
	version   uint64
	instances []provider.Instance
	notices   []provider.Notice
	watcher   bool // the driver is an InterruptionWatcher
}

// listInventory lists driver p's instances and notices under key k, or
// keeps the last listing when p is provider.Versioned and its version has
// not moved since. ok is false when the listing failed. Called without
// c.mu (it calls the driver).
func (c *Controller) listInventory(ctx context.Context, k string, p provider.Provider) (l listing, ok bool) {
	vp, versioned := p.(provider.Versioned)
	var version uint64
	if versioned {
		// Read before listing: a change after it moves the version,
		// so the listing kept is never older than its version.
		version = vp.Version()
		c.mu.Lock()
		l, ok := c.scaleSt.listings[k]
		// A version is a driver's own count: another driver under the
		// key (a pool's new revision) is listed afresh.
		ok = ok && l.version == version && sameDriver(l.driver, p)
		if ok {
			c.scaleSt.kept++
		}
		c.mu.Unlock()
		if ok {
			return l, true
		}
	}
	list, err := p.List(ctx)
	if err != nil {
		c.cfg.Log.Warn("listing provider inventory", "provider", p.Name(), "inventory", k, "err", err)
		c.mu.Lock()
		delete(c.scaleSt.listings, k)
		c.mu.Unlock()
		return listing{}, false
	}
	l = listing{driver: p, version: version, instances: list}
	if w, is := p.(provider.InterruptionWatcher); is {
		l.watcher = true
		ns, err := w.Notices(ctx)
		if err == nil {
			l.notices = ns
		} else {
			versioned = false // listed again next cycle
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scaleSt.listed++
	if versioned {
		if c.scaleSt.listings == nil {
			c.scaleSt.listings = map[string]listing{}
		}
		c.scaleSt.listings[k] = l
	} else {
		delete(c.scaleSt.listings, k)
	}
	return l, true
}
