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
// Controller.mu. The scale loop refreshes it every cycle; a pass fills in
// only pools it has not seen at this revision. Its mutex guards the cache
// and is never held across a provider call or with Controller.mu.
type poolDrivers struct {
	mu    sync.Mutex
	pools map[string]poolDriver
}

type poolDriver struct {
	revision int
	p        provider.Provider // nil: does not launch
	offers   []model.Offer
	sells    map[autoscaler.OfferIdent]bool
}

// launchView is what the pools' drivers offer now.
type launchView struct {
	drivers autoscaler.Drivers
	byPool  map[string]provider.Provider
	// offers are every launching driver's offers, each once, by pool
	// name order.
	offers []model.Offer
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
// With refresh every pool's offers are listed again (the scale loop);
// without, only pools new or changed since the last listing (a pass).
// It calls providers: never call it holding c.mu.
func (c *Controller) launchDrivers(ctx context.Context, pools []*model.NodePool, refresh bool) launchView {
	pd := &c.scaleSt.drivers
	v := launchView{drivers: autoscaler.Drivers{}, byPool: map[string]provider.Provider{}}
	seen := map[autoscaler.OfferIdent]bool{}
	for _, p := range pools {
		pd.mu.Lock()
		e, ok := pd.pools[p.Name]
		pd.mu.Unlock()
		if refresh || !ok || e.revision != p.Revision {
			e = poolDriver{revision: p.Revision}
			if d := c.driverFor(p); d != nil && provider.Launches(d) {
				offers, err := d.Offers(ctx)
				if err != nil {
					c.cfg.Log.Warn("listing pool offers", "pool", p.Name, "provider", d.Name(), "err", err)
				}
				offers = c.livePrices(ctx, d, offers)
				e.p, e.offers, e.sells = d, offers, make(map[autoscaler.OfferIdent]bool, len(offers))
				for _, o := range offers {
					e.sells[autoscaler.IdentOf(o)] = true
				}
			}
			pd.mu.Lock()
			if pd.pools == nil {
				pd.pools = map[string]poolDriver{}
			}
			pd.pools[p.Name] = e
			pd.mu.Unlock()
		}
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
	if refresh {
		// Forget removed pools.
		pd.mu.Lock()
		for name := range pd.pools {
			if !slices.ContainsFunc(pools, func(p *model.NodePool) bool { return p.Name == name }) {
				delete(pd.pools, name)
			}
		}
		pd.mu.Unlock()
	}
	return v
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
