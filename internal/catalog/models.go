package catalog

import (
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// PriceRange is the cheapest and dearest price per GPU-hour, in USD, of a
// set of offers.
type PriceRange struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// GPUModel summarises the offers of one accelerator model.
type GPUModel struct {
	GPU    string `json:"gpu"`
	Vendor string `json:"vendor,omitempty"`
	// TPU marks a TPU slice (tpu-v5p-8), which the catalog sells whole,
	// one name per size.
	TPU bool `json:"tpu,omitempty"`
	// GPUMemory is per GPU: the most any of the model's offers carries;
	// MinGPUMemory the least (variants such as H100 NVL, and marketplace
	// offers that report usable memory, differ). Zero for TPU slices,
	// whose memory the catalog does not give.
	GPUMemory    model.Bytes `json:"gpuMemory,omitempty"`
	MinGPUMemory model.Bytes `json:"minGpuMemory,omitempty"`
	// Providers sell the model, sorted.
	Providers []string `json:"providers"`
	// Offers counts the matching offers (instance type × region × zone ×
	// capacity type).
	Offers int `json:"offers"`
	// OnDemand and Spot are the price ranges per GPU-hour; nil when no
	// matching offer has that capacity type.
	OnDemand *PriceRange `json:"onDemand,omitempty"`
	Spot     *PriceRange `json:"spot,omitempty"`
}

// isTPUSlice reports whether a catalog accelerator name is a TPU slice.
func isTPUSlice(name string) bool {
	lower := strings.ToLower(name)
	return specName(lower) != lower
}

// Models summarises, per accelerator model, the offers that match q's
// filters (its sort, offset and limit aside), sorted by model name.
func (c *Catalog) Models(q Query) []GPUModel {
	q.Sort, q.Offset, q.Limit = "", 0, 0
	byGPU := map[string]*GPUModel{}
	var out []*GPUModel
	for _, o := range c.Query(q) {
		m := byGPU[o.GPU]
		if m == nil {
			m = &GPUModel{GPU: o.GPU, MinGPUMemory: o.GPUMemory, TPU: isTPUSlice(o.GPU)}
			if a, ok := c.Accelerator(o.GPU); ok {
				m.Vendor = a.Vendor
			}
			byGPU[o.GPU] = m
			out = append(out, m)
		}
		m.Offers++
		m.GPUMemory, m.MinGPUMemory = max(m.GPUMemory, o.GPUMemory), min(m.MinGPUMemory, o.GPUMemory)
		if !slices.Contains(m.Providers, o.Provider) {
			m.Providers = append(m.Providers, o.Provider)
		}
		r := &m.OnDemand
		if o.CapacityType == model.Spot {
			r = &m.Spot
		}
		p := o.PricePerGPUHour()
		if *r == nil {
			*r = &PriceRange{Min: p, Max: p}
		}
		(*r).Min, (*r).Max = min((*r).Min, p), max((*r).Max, p)
	}
	slices.SortFunc(out, func(a, b *GPUModel) int { return strings.Compare(strings.ToLower(a.GPU), strings.ToLower(b.GPU)) })
	models := make([]GPUModel, len(out))
	for i, m := range out {
		slices.Sort(m.Providers)
		models[i] = *m
	}
	return models
}
