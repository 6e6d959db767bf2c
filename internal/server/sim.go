package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/sim/live"
)

// SimConfig is what `up --sim` takes.
type SimConfig struct {
	Enabled   bool
	Scenario  string
	TimeScale float64
	Clouds    []string
}

// defaultSimPool is the pool `up --sim` scales while the fleet declares
// none: any simulated cloud, spot or on-demand, 0 to 8 nodes, an empty node
// kept 5 minutes. Applying a fleet with a NodePool replaces it.
func defaultSimPool(clouds []string) *model.NodePool {
	return &model.NodePool{Name: "sim", Spec: model.NodePoolSpec{
		Provider: model.ProviderSim, Sim: &model.SimPoolSettings{Clouds: clouds},
		CapacityTypes: []model.CapacityType{model.Spot, model.OnDemand},
		Min:           0, Max: 8, IdleTimeout: model.Duration(5 * time.Minute),
	}}
}

// newSimProvider builds the simulated clouds from the embedded catalog on
// the wall clock.
func newSimProvider(c SimConfig, cat *catalog.Catalog) (*sim.Provider, error) {
	var scn *sim.Scenario
	if c.Scenario != "" {
		data, err := os.ReadFile(c.Scenario)
		if err != nil {
			return nil, fmt.Errorf("reading --sim-scenario: %w", err)
		}
		if scn, err = sim.ParseScenario(data); err != nil {
			return nil, fmt.Errorf("--sim-scenario %s: %w", c.Scenario, err)
		}
	}
	return sim.New(sim.Config{Catalog: cat, Providers: c.Clouds, Scenario: scn, TimeScale: c.TimeScale, Seed: time.Now().UnixNano()})
}

// simScale wires the sim provider into the controller config.
func simScale(sp *sim.Provider, nodes *live.Nodes, clouds []string) (func(ctx context.Context) []model.Offer, controller.ScaleConfig) {
	offers := func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o }
	return offers, controller.ScaleConfig{
		Providers:    []provider.Provider{sp},
		StartNode:    nodes.Start,
		StopNode:     nodes.Stop,
		DefaultPools: []*model.NodePool{defaultSimPool(clouds)},
	}
}
