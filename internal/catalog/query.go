package catalog

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Query sort orders.
const (
	// SortPrice orders by price per GPU-hour, cheapest first (the default).
	SortPrice = "price"
	// SortTotal orders by instance price per hour, cheapest first.
	SortTotal = "total"
	// SortMemory orders by GPU memory, most first.
	SortMemory = "memory"
	// SortGPUs orders by GPU count, most first.
	SortGPUs = "gpus"
)

// Query selects offers. Zero fields do not filter; list fields match any of
// their elements. Ties in the chosen order fall back to the default order,
// in which no two offers tie.
type Query struct {
	// GPUs are accelerator models, matched without regard to case; an
	// unknown model matches nothing.
	GPUs []string `json:"gpus,omitempty"`
	// MinGPUMemory is the least memory per GPU. TPU slices, whose memory
	// the catalog does not give, never meet a minimum.
	MinGPUMemory model.Bytes `json:"minGPUMemory,omitempty"`
	// GPUCount selects instances with exactly this many GPUs.
	GPUCount int `json:"gpuCount,omitempty"`
	// MinGPUCount selects instances with at least this many GPUs.
	MinGPUCount int `json:"minGPUCount,omitempty"`
	// Providers are cloud names such as "aws", matched without regard to
	// case.
	Providers []string `json:"providers,omitempty"`
	// Regions are shell patterns such as "us-*" (path.Match syntax).
	Regions []string `json:"regions,omitempty"`
	// CapacityTypes are model.OnDemand or model.Spot.
	CapacityTypes []model.CapacityType `json:"capacityTypes,omitempty"`
	// MaxPricePerHour caps the instance price in USD per hour.
	MaxPricePerHour float64 `json:"maxPricePerHour,omitempty"`
	// Sort is SortPrice (when empty), SortTotal, SortMemory or SortGPUs.
	Sort string `json:"sort,omitempty"`
	// Offset skips this many matches, in q's order, before Limit applies
	// (pages: Offset = (page-1)·Limit).
	Offset int `json:"offset,omitempty"`
	// Limit caps the number of offers returned.
	Limit int `json:"limit,omitempty"`
}

// Validate returns every problem with q, each with its field's JSON path.
// Query treats what Validate rejects leniently (a bad pattern matches
// nothing, a negative number does not filter), but callers should
// validate user input first.
func (q Query) Validate() model.FieldErrors {
	var errs model.FieldErrors
	for i, g := range q.GPUs {
		if strings.TrimSpace(g) == "" {
			errs.Add(fmt.Sprintf("gpus[%d]", i), "must not be empty")
		}
	}
	if q.MinGPUMemory < 0 {
		errs.Add("minGPUMemory", "must not be negative")
	}
	if q.GPUCount < 0 {
		errs.Add("gpuCount", "must not be negative")
	}
	if q.MinGPUCount < 0 {
		errs.Add("minGPUCount", "must not be negative")
	}
	if q.GPUCount > 0 && q.MinGPUCount > q.GPUCount {
		errs.Add("minGPUCount", fmt.Sprintf("%d exceeds gpuCount %d, so nothing can match", q.MinGPUCount, q.GPUCount))
	}
	for i, p := range q.Providers {
		if strings.TrimSpace(p) == "" {
			errs.Add(fmt.Sprintf("providers[%d]", i), "must not be empty")
		}
	}
	for i, r := range q.Regions {
		if _, err := path.Match(r, ""); err != nil {
			errs.Add(fmt.Sprintf("regions[%d]", i), fmt.Sprintf("%q is not a shell pattern such as us-*", r))
		}
	}
	for i, ct := range q.CapacityTypes {
		if ct != model.OnDemand && ct != model.Spot {
			errs.Add(fmt.Sprintf("capacityTypes[%d]", i), fmt.Sprintf("%q is not %s or %s, the types the catalog sells", ct, model.OnDemand, model.Spot))
		}
	}
	if q.MaxPricePerHour < 0 || math.IsNaN(q.MaxPricePerHour) || math.IsInf(q.MaxPricePerHour, 0) {
		errs.Add("maxPricePerHour", "must be a non-negative number")
	}
	switch q.Sort {
	case "", SortPrice, SortTotal, SortMemory, SortGPUs:
	default:
		errs.Add("sort", fmt.Sprintf("%q is not one of %s, %s, %s, %s", q.Sort, SortPrice, SortTotal, SortMemory, SortGPUs))
	}
	if q.Offset < 0 {
		errs.Add("offset", "must not be negative")
	}
	if q.Limit < 0 {
		errs.Add("limit", "must not be negative")
	}
	return errs
}

// Query returns the offers that match q, in q's order; an empty slice, not
// nil, when none do, so that it encodes as a JSON array.
func (c *Catalog) Query(q Query) []model.Offer {
	regions := c.matchRegions(q.Regions)
	order := sortKey(q.Sort)
	candidates := c.candidates(q.GPUs)
	offset := max(q.Offset, 0)
	// Offers are stored in the default order, so with it the first
	// Offset+Limit matches are the answer and the scan can stop there.
	stopAt := len(candidates)
	if order == nil && q.Limit > 0 {
		stopAt = min(stopAt, offset+q.Limit)
	}
	hits := make([]int32, 0, stopAt)
	for _, i := range candidates {
		if q.matches(&c.offers[i], regions) {
			hits = append(hits, i)
			if len(hits) == stopAt {
				break
			}
		}
	}
	if order != nil {
		// Positions break ties, which keeps the default order among equals.
		slices.SortFunc(hits, func(a, b int32) int {
			return cmp.Or(order(&c.offers[a], &c.offers[b]), cmp.Compare(a, b))
		})
	}
	hits = hits[min(offset, len(hits)):]
	if q.Limit > 0 && len(hits) > q.Limit {
		hits = hits[:q.Limit]
	}
	out := make([]model.Offer, len(hits))
	for j, i := range hits {
		out[j] = c.offers[i]
	}
	return out
}

// candidates returns the positions of the offers of the given GPU models,
// ascending, or of every offer when gpus is empty.
func (c *Catalog) candidates(gpus []string) []int32 {
	if len(gpus) == 0 {
		all := make([]int32, len(c.offers))
		for i := range all {
			all[i] = int32(i)
		}
		return all
	}
	var lists [][]int32
	seen := map[string]bool{}
	for _, g := range gpus {
		canon, ok := c.CanonicalGPU(g)
		if ok && !seen[canon] {
			seen[canon] = true
			lists = append(lists, c.byGPU[canon])
		}
	}
	if len(lists) == 1 {
		return lists[0]
	}
	merged := slices.Concat(lists...)
	slices.Sort(merged)
	return merged
}

// matchRegions returns the set of offer regions that match any pattern, or
// nil when there are no patterns.
func (c *Catalog) matchRegions(patterns []string) map[string]bool {
	if len(patterns) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, r := range c.regions {
		for _, p := range patterns {
			if ok, _ := path.Match(p, r); ok {
				set[r] = true
				break
			}
		}
	}
	return set
}

// matches applies every filter but the GPU models, which candidates has
// applied, and the regions, which come as the set of matching regions.
func (q *Query) matches(o *model.Offer, regions map[string]bool) bool {
	switch {
	case q.MinGPUMemory > 0 && o.GPUMemory < q.MinGPUMemory,
		q.GPUCount > 0 && o.GPUCount != q.GPUCount,
		q.MinGPUCount > 0 && o.GPUCount < q.MinGPUCount,
		q.MaxPricePerHour > 0 && o.PricePerHour > q.MaxPricePerHour,
		len(q.CapacityTypes) > 0 && !slices.Contains(q.CapacityTypes, o.CapacityType),
		len(q.Providers) > 0 && !slices.ContainsFunc(q.Providers, func(p string) bool { return strings.EqualFold(p, o.Provider) }),
		regions != nil && !regions[o.Region]:
		return false
	}
	return true
}

// sortKey returns the primary comparison of a sort order, or nil for the
// default order, which the stored offers already have.
func sortKey(sort string) func(a, b *model.Offer) int {
	switch sort {
	case SortTotal:
		return func(a, b *model.Offer) int { return cmp.Compare(a.PricePerHour, b.PricePerHour) }
	case SortMemory:
		return func(a, b *model.Offer) int { return cmp.Compare(b.GPUMemory, a.GPUMemory) }
	case SortGPUs:
		return func(a, b *model.Offer) int { return cmp.Compare(b.GPUCount, a.GPUCount) }
	}
	return nil
}

// compareOffers is the default order: price per GPU-hour, then instance
// price, then every identifying field, so that no two offers tie. Nearly
// half the neighbours in that order share a price, so the fields are
// compared lazily; cmp.Or would evaluate them all.
func compareOffers(a, b *model.Offer) int {
	switch {
	case a.PricePerGPUHour() != b.PricePerGPUHour():
		return cmp.Compare(a.PricePerGPUHour(), b.PricePerGPUHour())
	case a.PricePerHour != b.PricePerHour:
		return cmp.Compare(a.PricePerHour, b.PricePerHour)
	case a.Provider != b.Provider:
		return strings.Compare(a.Provider, b.Provider)
	case a.Region != b.Region:
		return strings.Compare(a.Region, b.Region)
	case a.Zone != b.Zone:
		return strings.Compare(a.Zone, b.Zone)
	case a.InstanceType != b.InstanceType:
		return strings.Compare(a.InstanceType, b.InstanceType)
	case a.GPU != b.GPU:
		return strings.Compare(a.GPU, b.GPU)
	case a.GPUCount != b.GPUCount:
		return cmp.Compare(a.GPUCount, b.GPUCount)
	case a.GPUMemory != b.GPUMemory:
		return cmp.Compare(a.GPUMemory, b.GPUMemory)
	}
	return strings.Compare(string(a.CapacityType), string(b.CapacityType))
}

func compareTypes(a, b InstanceType) int {
	return cmp.Or(
		strings.Compare(a.Provider, b.Provider),
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.GPU, b.GPU),
		cmp.Compare(a.GPUCount, b.GPUCount),
		cmp.Compare(a.GPUMemory, b.GPUMemory),
		cmp.Compare(a.VCPUs, b.VCPUs),
		cmp.Compare(a.Memory, b.Memory),
	)
}

// QueryWith is Query over the catalog's offers and extra ones (owned
// machines at their declared prices), merged in q's order. Extra offers'
// GPU models and regions are matched by name and pattern.
func (c *Catalog) QueryWith(q Query, extra []model.Offer) []model.Offer {
	if len(extra) == 0 {
		return c.Query(q)
	}
	limit, offset := q.Limit, max(q.Offset, 0)
	q.Limit, q.Offset = 0, 0
	out := c.Query(q)
	for i := range extra {
		o := &extra[i]
		if len(q.GPUs) > 0 && !slices.ContainsFunc(q.GPUs, func(g string) bool {
			canon, ok := c.CanonicalGPU(g)
			return strings.EqualFold(g, o.GPU) || ok && canon == o.GPU
		}) {
			continue
		}
		if len(q.Regions) > 0 && !slices.ContainsFunc(q.Regions, func(p string) bool { ok, _ := path.Match(p, o.Region); return ok }) {
			continue
		}
		if q.matches(o, nil) {
			out = append(out, *o)
		}
	}
	order := sortKey(q.Sort)
	slices.SortStableFunc(out, func(a, b model.Offer) int {
		if order != nil {
			if k := order(&a, &b); k != 0 {
				return k
			}
		}
		return compareOffers(&a, &b)
	})
	out = out[min(offset, len(out)):]
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Page is QueryWith and the number of offers that match q across all pages
// (Offset and Limit aside), for a caller that says how many more there are.
func (c *Catalog) Page(q Query, extra []model.Offer) (page []model.Offer, total int) {
	all := q
	all.Offset, all.Limit = 0, 0
	matches := c.QueryWith(all, extra)
	total = len(matches)
	matches = matches[min(max(q.Offset, 0), total):]
	if q.Limit > 0 && len(matches) > q.Limit {
		matches = matches[:q.Limit]
	}
	return matches, total
}
