package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// PoolView is the simulated clouds as one pool sees them: the offers of
// its spec.sim.clouds only (all when empty). Every instance, notice and
// bill is the shared simulation's, so views of one Provider list the same
// inventory under the same name.
type PoolView struct {
	*Provider
	clouds []string
}

var (
	_ provider.Provider            = (*PoolView)(nil)
	_ provider.InterruptionWatcher = (*PoolView)(nil)
	_ provider.Interrupter         = (*PoolView)(nil)
	_ provider.Biller              = (*PoolView)(nil)
)

// ForPool returns p narrowed to pool's clouds (the registry's factory for
// sim pools).
func (p *Provider) ForPool(pool *model.NodePool) (provider.Provider, error) {
	v := &PoolView{Provider: p}
	if pool.Spec.Sim != nil {
		v.clouds = slices.Clone(pool.Spec.Sim.Clouds)
	}
	return v, nil
}

func (v *PoolView) sells(o model.Offer) bool {
	return len(v.clouds) == 0 || slices.Contains(v.clouds, o.Provider)
}

// Offers lists the simulated offers of the pool's clouds.
func (v *PoolView) Offers(ctx context.Context) ([]model.Offer, error) {
	all, err := v.Provider.Offers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(o model.Offer) bool { return !v.sells(o) }), nil
}

// Launch launches an offer of the pool's clouds; another cloud's is
// ErrUnknownOffer.
func (v *PoolView) Launch(ctx context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	if !v.sells(req.Offer) {
		return provider.Instance{}, fmt.Errorf("launching %s in %s: pool sells only %v: %w", req.Offer.InstanceType, req.Offer.Provider, v.clouds, provider.ErrUnknownOffer)
	}
	return v.Provider.Launch(ctx, req)
}

// PoolPrice prices a sim pool: it buys the catalog offers of its clouds
// (provider.PoolPricer).
func PoolPrice(s model.NodePoolSpec) provider.PoolPrice {
	var pp provider.PoolPrice
	if s.Sim != nil {
		pp.Clouds = slices.Clone(s.Sim.Clouds)
	}
	return pp
}

// CheckPool is the sim driver's check of a pool (registry.Driver.Check):
// the clouds its sim block names, with field paths under prefix.
func CheckPool(spec *model.NodePoolSpec, prefix string, _ func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	if spec.Sim == nil {
		return nil
	}
	for i, c := range spec.Sim.Clouds {
		if strings.TrimSpace(c) == "" {
			fe.Add(fmt.Sprintf("%s.sim.clouds[%d]", prefix, i), "must not be empty")
		}
	}
	return fe
}
