package controller

import (
	"context"
	"slices"
	"sync"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// PoolDrivers gives a declared pool its provider driver
// (registry.Registry). For returns nil and no error for a pool the scale
// loop does not launch into (its driver runs apart, as Kubernetes pools
// do).
type PoolDrivers interface {
	For(pool *model.NodePool) (provider.Provider, error)
}

// poolDrivers caches, per pool, its driver when that driver launches
// (provider.Launches) and the offers it sells, so a scheduling pass knows
// which offers each pool can buy without calling a provider under
// Controller.mu. The scale loop refreshes it every cycle (a
// provider.Versioned driver whose version has not moved is not asked
// again); a pass fills in only pools it has not seen at this revision.
// The view built from the entries is kept until one of them changes. Its
// mutex guards the cache and is never held across a provider call or
// with Controller.mu.
type poolDrivers struct {
	mu    sync.Mutex
	pools map[string]poolDriver
	// gen counts changes of the entries; view was built at viewGen for
	// the pools named in viewOf (name and revision, in order).
	gen     uint64
	view    launchView
	viewGen uint64
	viewOf  []poolRev
	viewSeq uint64 // numbers the views built
}

type poolDriver struct {
	revision int
	p        provider.Provider // nil: does not launch
	offers   []model.Offer
	sells    map[autoscaler.OfferIdent]bool
	// version is a Versioned driver's version when offers were listed.
	version   uint64
	versioned bool
}

type poolRev struct {
	name     string
	revision int
}

// launchView is what the pools' drivers offer now.
type launchView struct {
	drivers autoscaler.Drivers
	byPool  map[string]provider.Provider
	// offers are every launching driver's offers, each once, by pool
	// name order.
	offers []model.Offer
	// gen changes whenever the drivers or their offers do (never zero
	// for a built view); equal gens are equal views.
	gen uint64
}

// driverFor resolves pool's driver: ScaleConfig.Drivers when set, else
// the provider of ScaleConfig.Providers named as the pool's spec.provider
// (a wiring without a registry: one driver per provider name).
func (c *Controller) driverFor(p *model.NodePool) provider.Provider {
	sc := c.cfg.Scale
	if sc.Drivers != nil {
		d, err := sc.Drivers.For(p)
		if err != nil {
			c.cfg.Log.Warn("building pool driver", "pool", p.Name, "err", err)
			return nil
		}
		return d
	}
	for _, d := range sc.Providers {
		if d.Name() == p.Spec.Provider {
			return d
		}
	}
	return nil
}

// launchDrivers returns the launching drivers of pools and what they sell.
// With refresh every pool's offers are listed again (the scale loop), but
// for a provider.Versioned driver whose version has not moved; without,
// only pools new or changed since the last listing (a pass). The view is
// the last one built while no entry changed. Callers must not change it.
// It calls providers: never call it holding c.mu.
func (c *Controller) launchDrivers(ctx context.Context, pools []*model.NodePool, refresh bool) launchView {
	pd := &c.scaleSt.drivers
	for _, p := range pools {
		pd.mu.Lock()
		old, ok := pd.pools[p.Name]
		pd.mu.Unlock()
		if ok && old.revision == p.Revision && !refresh {
			continue
		}
		d := c.driverFor(p)
		if d == nil || !provider.Launches(d) {
			d = nil
		}
		var version uint64
		vp, versioned := d.(provider.Versioned)
		if versioned {
			version = vp.Version() // before listing: see provider.Versioned
			if ok && old.revision == p.Revision && sameDriverOrNone(old.p, d) && old.versioned && old.version == version {
				continue
			}
		}
		e := poolDriver{revision: p.Revision, p: d, version: version, versioned: versioned}
		if d != nil {
			offers, err := d.Offers(ctx)
			if err != nil {
				c.cfg.Log.Warn("listing pool offers", "pool", p.Name, "provider", d.Name(), "err", err)
				e.versioned = false // asked again next cycle
			}
			e.offers = c.livePrices(ctx, d, offers)
		}
		pd.mu.Lock()
		if pd.pools == nil {
			pd.pools = map[string]poolDriver{}
		}
		if ok && old.revision == e.revision && sameDriverOrNone(old.p, e.p) && slices.Equal(old.offers, e.offers) {
			// Listed again, the same: the view stands.
			old.version, old.versioned = e.version, e.versioned
			pd.pools[p.Name] = old
		} else {
			if e.p != nil {
				e.sells = make(map[autoscaler.OfferIdent]bool, len(e.offers))
				for _, o := range e.offers {
					e.sells[autoscaler.IdentOf(o)] = true
				}
			}
			pd.pools[p.Name] = e
			pd.gen++
		}
		pd.mu.Unlock()
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if refresh {
		// Forget removed pools.
		for name := range pd.pools {
			if !slices.ContainsFunc(pools, func(p *model.NodePool) bool { return p.Name == name }) {
				delete(pd.pools, name)
				pd.gen++
			}
		}
	}
	if pd.view.gen != 0 && pd.viewGen == pd.gen && slices.EqualFunc(pools, pd.viewOf, func(p *model.NodePool, r poolRev) bool {
		return p.Name == r.name && p.Revision == r.revision
	}) {
		return pd.view
	}
	v := launchView{drivers: autoscaler.Drivers{}, byPool: map[string]provider.Provider{}}
	seen := map[autoscaler.OfferIdent]bool{}
	pd.viewOf = pd.viewOf[:0]
	for _, p := range pools {
		pd.viewOf = append(pd.viewOf, poolRev{p.Name, p.Revision})
		e := pd.pools[p.Name]
		if e.p == nil {
			continue
		}
		sells := e.sells
		v.drivers[p.Name] = autoscaler.PoolDriver{Name: e.p.Name(), Sells: func(o model.Offer) bool { return sells[autoscaler.IdentOf(o)] }}
		v.byPool[p.Name] = e.p
		for _, o := range e.offers {
			if k := autoscaler.IdentOf(o); !seen[k] {
				seen[k] = true
				v.offers = append(v.offers, o)
			}
		}
	}
	pd.viewSeq++
	v.gen = pd.viewSeq
	pd.view, pd.viewGen = v, pd.gen
	return v
}

// sameDriverOrNone is sameDriver where either may be nil.
func sameDriverOrNone(a, b provider.Provider) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return sameDriver(a, b)
}

// livePrices overrides offers' catalog prices with the driver's live ones
// when it is a provider.PriceSource, dated by when they were read; on an
// error the offers keep their prices.
func (c *Controller) livePrices(ctx context.Context, d provider.Provider, offers []model.Offer) []model.Offer {
	ps, ok := d.(provider.PriceSource)
	if !ok || len(offers) == 0 {
		return offers
	}
	prices, asOf, err := ps.Prices(ctx)
	if err != nil {
		c.cfg.Log.Warn("reading live prices; keeping the catalog's", "provider", d.Name(), "err", err)
		return offers
	}
	live := make(map[string]float64, len(prices))
	for _, o := range prices {
		live[autoscaler.OfferKey(o)] = o.PricePerHour
	}
	for i, o := range offers {
		if p, ok := live[autoscaler.OfferKey(o)]; ok {
			offers[i].PricePerHour, offers[i].PriceAsOf = p, asOf
		}
	}
	return offers
}

// nodeDriver returns the driver of node n: its pool's (declared or
// removed, while its instances are retired), else the wired driver named
// as its provider; nil when none is. Two pools of one driver never stand
// in for each other.
func (c *Controller) nodeDriver(n *model.Node) provider.Provider {
	c.mu.Lock()
	var pool *model.NodePool
	for _, p := range c.fleet.pools {
		if p.Name == n.Pool {
			pool = p
		}
	}
	if pool == nil {
		pool = c.scaleSt.retired[n.Pool]
	}
	if pool == nil && len(c.fleet.pools) == 0 {
		for _, p := range c.cfg.Scale.DefaultPools {
			if p.Name == n.Pool {
				pool = p
			}
		}
	}
	c.mu.Unlock()
	if pool != nil {
		if d := c.driverFor(pool); d != nil {
			return d
		}
	}
	for _, p := range c.cfg.Scale.Providers {
		if p.Name() == n.Provider {
			return p
		}
	}
	return nil
}

// scaling reports whether the scale loop runs: some driver is wired.
func (sc *ScaleConfig) scaling() bool { return len(sc.Providers) > 0 || sc.Drivers != nil }
