// Package registry holds the provider drivers the server wires in, by the
// name a NodePool's spec.provider gives, and builds each pool's driver
// from its settings block. It is the only place where a driver's name
// means something: the core (autoscaler, scheduler, fleet, controller)
// decides what a pool can do from the capabilities its driver declares
// (provider.Launches, provider.FixedCapacity, …), never from the name.
//
// Adding a driver touches its own package (the Provider, its pool check
// and its PoolPricer), its settings block in model.NodePoolSpec, and one
// Driver in the server's wiring.
package registry

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Factory builds the driver of one pool from its spec (its settings block
// is pool.Spec's field of the driver's name). It must not block for long:
// it runs on the scale loop. A factory may return one shared driver for
// every pool (a simulator), or a view of one narrowed to the pool.
type Factory func(pool *model.NodePool) (provider.Provider, error)

// Driver is one registered provider driver.
type Driver struct {
	// Name is what spec.provider says.
	Name string
	// New builds a pool's driver; nil when the driver's pools are run by
	// a component of their own and the scale loop does not launch into
	// them (kubernetes, static and local follow the fleet themselves).
	New Factory
	// Price prices a pool from its spec; nil: the pool is not priced.
	Price provider.PoolPricer
	// Check fills in the driver's defaults of a pool's spec and reports
	// every problem with the pool as this driver sees it (its settings
	// block above all), with field paths under prefix ("spec"); knownGPU,
	// when not nil, says whether a GPU model exists. Nil: the driver has
	// no settings to check.
	Check func(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors
}

// Registry is the set of drivers, and the drivers built for pools. Safe
// for concurrent use; its mutex guards the built drivers.
type Registry struct {
	drivers map[string]Driver

	mu    sync.Mutex
	built map[string]built // by pool name
}

type built struct {
	revision int
	spec     string // the driver name it was built for
	p        provider.Provider
	err      error
}

// New registers ds. Errors: a driver without a name, or a name twice.
func New(ds ...Driver) (*Registry, error) {
	r := &Registry{drivers: map[string]Driver{}, built: map[string]built{}}
	var errs []error
	for i, d := range ds {
		switch _, dup := r.drivers[d.Name]; {
		case d.Name == "":
			errs = append(errs, fmt.Errorf("registering driver %d: no name", i))
		case dup:
			errs = append(errs, fmt.Errorf("registering driver %q: registered twice", d.Name))
		default:
			r.drivers[d.Name] = d
		}
	}
	return r, errors.Join(errs...)
}

// Names lists the registered drivers, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.drivers))
	for n := range r.drivers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Launches reports whether some registered driver builds pool drivers
// (Driver.New): without one there is nothing for a scale loop to do.
func (r *Registry) Launches() bool {
	for _, d := range r.drivers {
		if d.New != nil {
			return true
		}
	}
	return false
}

// Known reports whether name is a registered driver.
func (r *Registry) Known(name string) bool {
	_, ok := r.drivers[name]
	return ok
}

// Price prices a pool of spec by its driver's PoolPricer.
func (r *Registry) Price(spec model.NodePoolSpec) provider.PoolPrice {
	d, ok := r.drivers[spec.Provider]
	switch {
	case !ok:
		return provider.PoolPrice{Unknown: fmt.Sprintf("provider %q is not registered (registered: %v)", spec.Provider, r.Names())}
	case d.Price == nil:
		return provider.PoolPrice{Unknown: fmt.Sprintf("provider %q is not priced", spec.Provider)}
	}
	return d.Price(spec)
}

// CheckPool checks a pool's spec with its driver's Check (filling in the
// driver's defaults first), under prefix; a pool naming no registered
// driver is a problem at prefix.provider. A spec without a provider is
// left to model.NodePoolSpec.Validate. It is manifest.Checks.Pool.
func (r *Registry) CheckPool(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors {
	if spec.Provider == "" {
		return nil
	}
	d, ok := r.drivers[spec.Provider]
	switch {
	case !ok:
		return model.FieldErrors{{Path: prefix + ".provider", Message: fmt.Sprintf("%q is not a registered driver (%s)", spec.Provider, strings.Join(r.Names(), ", "))}}
	case d.Check == nil:
		return nil
	}
	return d.Check(spec, prefix, knownGPU)
}

// ErrUnknownDriver: a pool names a driver that is not registered.
var ErrUnknownDriver = errors.New("provider driver not registered")

// For returns pool's driver, built once per pool revision (a changed spec
// rebuilds it). It returns nil and no error for a pool whose driver the
// scale loop does not launch into (Driver.New nil). A failed build is
// remembered for the revision, so it is not retried every cycle.
func (r *Registry) For(pool *model.NodePool) (provider.Provider, error) {
	d, ok := r.drivers[pool.Spec.Provider]
	if !ok {
		return nil, fmt.Errorf("pool %s: %q: %w", pool.Name, pool.Spec.Provider, ErrUnknownDriver)
	}
	if d.New == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.built[pool.Name]; ok && b.revision == pool.Revision && b.spec == pool.Spec.Provider {
		return b.p, b.err
	}
	p, err := d.New(pool)
	if err != nil {
		err = fmt.Errorf("building the %s driver of pool %s: %w", d.Name, pool.Name, err)
	}
	r.built[pool.Name] = built{revision: pool.Revision, spec: pool.Spec.Provider, p: p, err: err}
	return p, err
}

// Forget drops the drivers built for pools not in keep (removed pools).
func (r *Registry) Forget(keep []*model.NodePool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.built {
		if !slices.ContainsFunc(keep, func(p *model.NodePool) bool { return p.Name == name }) {
			delete(r.built, name)
		}
	}
}
