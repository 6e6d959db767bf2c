package server

import (
	"fmt"
	"math"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/model"
)

// priceSourceDemo marks the price of demo GPUs (--fake-gpus): the
// catalog's on-demand list price, so demos show what such GPUs cost.
const priceSourceDemo model.PriceSource = "demo-catalog"

// demoPrice prices a machine of demo GPUs at the catalog's lowest
// on-demand price per GPU-hour of their model, times their number. It
// returns the instance type the local node registers with (so the price
// table can match it) and the price; ok is false for real GPUs, no GPUs,
// or a model the catalog does not sell on demand. A --prices row for the
// same instance type wins (cost.PriceTable.WithInstanceType).
func demoPrice(inv gpu.Inventory, cat *catalog.Catalog) (instanceType string, p cost.Price, ok bool) {
	if inv.Source != gpu.SourceFake || len(inv.GPUs) == 0 {
		return "", cost.Price{}, false
	}
	name := inv.GPUs[0].Model
	if c, found := cat.CanonicalGPU(name); found {
		name = c
	}
	perGPU := math.Inf(1)
	for _, o := range cat.Offers() {
		if o.GPU == name && o.CapacityType == model.OnDemand && o.GPUCount > 0 && o.PricePerHour > 0 {
			perGPU = min(perGPU, o.PricePerGPUHour())
		}
	}
	if math.IsInf(perGPU, 1) {
		return "", cost.Price{}, false
	}
	instanceType = fmt.Sprintf("demo-%dx%s", len(inv.GPUs), name)
	return instanceType, cost.Price{PerHour: model.FromDollars(perGPU * float64(len(inv.GPUs))), Source: priceSourceDemo}, true
}
