package fleet

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Action is what applying a plan does to one object.
type Action string

// Actions.
const (
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
)

// Offers is the part of the catalog that prices pools; *catalog.Catalog
// implements it.
type Offers interface {
	// Query returns the matching offers in the query's order.
	Query(q catalog.Query) []model.Offer
}

// Pricing prices pools: each driver's PoolPricer says whether a pool's
// machines exist already (their declared prices) or are bought (the
// cheapest catalog offer it may launch); the server wires the registry's.
type Pricing struct {
	Offers Offers
	// Pool prices a pool's spec by its driver; nil prices no pool.
	Pool provider.PoolPricer
}

// Result is a plan: what would change, and what the desired pools cost.
type Result struct {
	// Changes are ordered by kind (NodePool, Queue, Project), then name.
	Changes []Change `json:"changes"`
	// MinPerHour and MaxPerHour total the desired pools' costs (pools
	// whose price is unknown count as 0; see Change.Cost.Unknown).
	MinPerHour float64 `json:"minPerHour"`
	MaxPerHour float64 `json:"maxPerHour"`
}

// Change is one object's change.
type Change struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Action Action `json:"action"`
	// Fields lists each changed leaf of the document, by path from its
	// root ("spec.max", `spec.quota["H100"].nominal`); for a create, every
	// leaf it declares; for a delete, none.
	Fields []FieldChange `json:"fields,omitempty"`
	// Cost (desired) and OldCost (current) price a NodePool; nil for other
	// kinds, Cost nil for a delete and OldCost nil for a create.
	Cost    *Cost `json:"cost,omitempty"`
	OldCost *Cost `json:"oldCost,omitempty"`
}

// FieldChange is one leaf that differs; Old or New is nil where the field
// is absent. Values are JSON.
type FieldChange struct {
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
}

// Cost is what a pool costs per hour at its minimum and maximum size, in
// USD (an estimate: a float, never ledger money).
//
// The rule: a node costs the cheapest offer the pool may launch (see
// PoolCost), so min × that price … max × that price. Static pools use
// their machines' declared prices, the cheapest first.
type Cost struct {
	MinPerHour  float64 `json:"minPerHour"`
	MaxPerHour  float64 `json:"maxPerHour"`
	NodePerHour float64 `json:"nodePerHour"`
	// Offer is the catalog offer a buying pool's nodes were priced at.
	Offer *model.Offer `json:"offer,omitempty"`
	// Unknown says why the pool could not be priced; the figures are
	// then 0.
	Unknown string `json:"unknown,omitempty"`
}

// Plan compares the desired fleet with the current one (the documents of
// the current revision; nil means none) and prices the desired pools with
// offers. It is pure.
func Plan(current, desired *manifest.Set, offers Pricing) Result {
	if current == nil {
		current = &manifest.Set{}
	}
	if desired == nil {
		desired = &manifest.Set{}
	}
	var r Result
	poolCost := func(d manifest.NodePool) *Cost {
		c := PoolCost(d.Spec, offers)
		return &c
	}
	diffKind(&r.Changes, manifest.KindNodePool, current.NodePools, desired.NodePools,
		func(d manifest.NodePool) string { return d.Metadata.Name }, poolCost)
	diffKind(&r.Changes, manifest.KindQueue, current.Queues, desired.Queues,
		func(d manifest.Queue) string { return d.Metadata.Name }, nil)
	diffKind(&r.Changes, manifest.KindProject, current.Projects, desired.Projects,
		func(d manifest.Project) string { return d.Metadata.Name }, nil)
	diffKind(&r.Changes, manifest.KindBudget, current.Budgets, desired.Budgets,
		func(d manifest.Budget) string { return d.Metadata.Name }, nil)
	diffKind(&r.Changes, manifest.KindPriorityClass, current.PriorityClasses, desired.PriorityClasses,
		func(d manifest.PriorityClass) string { return d.Metadata.Name }, nil)
	diffKind(&r.Changes, manifest.KindNotification, current.Notifications, desired.Notifications,
		func(d manifest.Notification) string { return d.Metadata.Name }, nil)
	for _, d := range desired.NodePools {
		c := PoolCost(d.Spec, offers)
		r.MinPerHour += c.MinPerHour
		r.MaxPerHour += c.MaxPerHour
	}
	if r.Changes == nil {
		r.Changes = []Change{}
	}
	return r
}

// diffKind appends the changes between two name-sorted lists of one kind.
func diffKind[D any](out *[]Change, kind string, cur, want []D, name func(D) string, cost func(D) *Cost) {
	byName := func(ds []D) map[string]D {
		m := make(map[string]D, len(ds))
		for _, d := range ds {
			m[name(d)] = d
		}
		return m
	}
	curM, wantM := byName(cur), byName(want)
	names := make([]string, 0, len(curM)+len(wantM))
	for n := range curM {
		names = append(names, n)
	}
	for n := range wantM {
		if _, ok := curM[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		c, hasCur := curM[n]
		w, hasWant := wantM[n]
		ch := Change{Kind: kind, Name: n}
		switch {
		case !hasCur:
			ch.Action = Create
			ch.Fields = fieldDiff(nil, w)
			if cost != nil {
				ch.Cost = cost(w)
			}
		case !hasWant:
			ch.Action = Delete
			if cost != nil {
				ch.OldCost = cost(c)
			}
		default:
			ch.Action = Update
			ch.Fields = fieldDiff(c, w)
			if len(ch.Fields) == 0 {
				continue
			}
			if cost != nil {
				ch.OldCost, ch.Cost = cost(c), cost(w)
			}
		}
		*out = append(*out, ch)
	}
}

// fieldDiff compares two documents leaf by leaf through their JSON; old
// nil means absent.
func fieldDiff(old, new any) []FieldChange {
	o, n := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	if old != nil {
		flatten("", toJSONValue(old), o)
	}
	flatten("", toJSONValue(new), n)
	paths := make([]string, 0, len(o)+len(n))
	for p := range o {
		paths = append(paths, p)
	}
	for p := range n {
		if _, ok := o[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var out []FieldChange
	for _, p := range paths {
		if p == "apiVersion" || p == "kind" || p == "metadata.name" {
			continue
		}
		ov, nv := o[p], n[p]
		if !bytes.Equal(ov, nv) {
			out = append(out, FieldChange{Path: p, Old: ov, New: nv})
		}
	}
	return out
}

func toJSONValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fleet: encoding a document: %v", err)) // validated documents always encode
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		panic(fmt.Sprintf("fleet: decoding a document: %v", err))
	}
	return x
}

// flatten records every leaf of x under its path. Empty objects and arrays
// hold no leaves, so they mean the same as absent ones.
func flatten(p string, x any, out map[string]json.RawMessage) {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			flatten(keyPath(p, k), e, out)
		}
	case []any:
		for i, e := range v {
			flatten(p+"["+strconv.Itoa(i)+"]", e, out)
		}
	default:
		b, _ := json.Marshal(v)
		out[p] = b
	}
}

// keyPath writes paths as manifest problems do: dots for plain keys,
// brackets and quotes for others.
func keyPath(p, key string) string {
	plain := key != ""
	for i := range len(key) {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			plain = false
		}
	}
	switch {
	case !plain:
		return p + "[" + strconv.Quote(key) + "]"
	case p == "":
		return key
	}
	return p + "." + key
}

// PoolCost prices a pool at its minimum and maximum size, by what its
// driver declares (Pricing.Pool):
//   - machines that exist already (provider.PoolPrice.Fixed): their
//     declared prices, cheapest first: min is the sum of the min cheapest
//     machines, max of the max cheapest; without a list every node costs
//     PerNode (a Kubernetes cluster's price per GPU-hour × GPUs per node,
//     this machine: free);
//   - bought capacity: the cheapest catalog offer the pool may launch (its
//     driver's clouds, its GPU requirements, allowed and not denied
//     regions, instance types and capacity types; spot included when
//     allowed) times min and max.
func PoolCost(s model.NodePoolSpec, pr Pricing) Cost {
	if pr.Pool == nil {
		return Cost{Unknown: fmt.Sprintf("provider %q is not priced", s.Provider)}
	}
	pp := pr.Pool(s)
	switch {
	case pp.Unknown != "":
		return Cost{Unknown: pp.Unknown}
	case pp.Fixed && pp.NodePrices == nil:
		return Cost{NodePerHour: pp.PerNode, MinPerHour: pp.PerNode * float64(s.Min), MaxPerHour: pp.PerNode * float64(s.Max)}
	case pp.Fixed:
		if len(pp.NodePrices) == 0 {
			return Cost{Unknown: "no machines"}
		}
		prices := slices.Clone(pp.NodePrices)
		slices.Sort(prices)
		var c Cost
		c.NodePerHour = prices[0]
		for i, p := range prices {
			if i < s.Min {
				c.MinPerHour += p
			}
			if i < s.Max {
				c.MaxPerHour += p
			}
		}
		return c
	}
	if pr.Offers == nil {
		return Cost{Unknown: "no catalog to price the pool"}
	}
	o, ok := cheapestOffer(s, pp.Clouds, pr.Offers)
	if !ok {
		return Cost{Unknown: "no catalog offer matches the pool's requirements, regions, instance types and capacity types"}
	}
	return Cost{NodePerHour: o.PricePerHour, MinPerHour: o.PricePerHour * float64(s.Min), MaxPerHour: o.PricePerHour * float64(s.Max), Offer: &o}
}

// cheapestOffer is the cheapest offer of clouds (empty: any) a pool may
// launch.
func cheapestOffer(s model.NodePoolSpec, clouds []string, offers Offers) (model.Offer, bool) {
	q := catalog.Query{
		GPUs:          s.Requirements.GPUModels,
		MinGPUMemory:  s.Requirements.MinGPUMemory,
		GPUCount:      s.Requirements.GPUsPerNode,
		Regions:       s.Regions.Allow,
		CapacityTypes: s.EffectiveCapacityTypes(),
		Sort:          catalog.SortPrice,
	}
	q.Providers = clouds
	for _, o := range offers.Query(q) {
		if len(s.InstanceTypes) > 0 && !slices.Contains(s.InstanceTypes, o.InstanceType) {
			continue
		}
		if slices.ContainsFunc(s.Regions.Deny, func(p string) bool { ok, _ := path.Match(p, o.Region); return ok }) {
			continue
		}
		return o, true
	}
	return model.Offer{}, false
}

// sortFindings orders findings for stable output.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Issue, b.Issue), cmp.Compare(a.Detail, b.Detail))
	})
}
