package fleet

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

// poolPrice is the wiring's pricing for the drivers these tests use: each
// driver's own PoolPricer.
func poolPrice(s model.NodePoolSpec) provider.PoolPrice {
	switch s.Provider {
	case static.Name:
		return static.PoolPrice(s)
	case "sim":
		return sim.PoolPrice(s)
	case "racks": // a driver of owned machines at a flat price, declared by capability alone
		return provider.PoolPrice{Fixed: true, PerNode: 4}
	}
	return provider.PoolPrice{Unknown: "not registered"}
}

// fakeOffers returns its offers for every query, cheapest first, keeping
// only the capacity types asked for.
type fakeOffers []model.Offer

func (f fakeOffers) Query(q catalog.Query) []model.Offer {
	var out []model.Offer
	for _, o := range f {
		for _, ct := range q.CapacityTypes {
			if o.CapacityType == ct {
				out = append(out, o)
			}
		}
	}
	return out
}

func simPool(name string, min, max int, cts ...model.CapacityType) manifest.NodePool {
	return manifest.NodePool{APIVersion: manifest.APIVersion, Kind: manifest.KindNodePool, Metadata: manifest.ObjectMeta{Name: name},
		Spec: model.NodePoolSpec{Provider: model.ProviderSim, Min: min, Max: max, CapacityTypes: cts}}
}

func queue(name string, weight float64) manifest.Queue {
	return manifest.Queue{APIVersion: manifest.APIVersion, Kind: manifest.KindQueue, Metadata: manifest.ObjectMeta{Name: name},
		Spec: model.QueueSpec{Weight: weight}}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestPlan(t *testing.T) {
	t.Parallel()
	spot := model.Offer{Provider: "aws", InstanceType: "p5", CapacityType: model.Spot, PricePerHour: 30}
	od := model.Offer{Provider: "aws", InstanceType: "p5", CapacityType: model.OnDemand, PricePerHour: 98}
	offers := fakeOffers{spot, od}
	static := manifest.NodePool{APIVersion: manifest.APIVersion, Kind: manifest.KindNodePool, Metadata: manifest.ObjectMeta{Name: "owned"},
		Spec: model.NodePoolSpec{Provider: model.ProviderStatic, Min: 1, Max: 2, Static: &model.StaticPoolSettings{Machines: []model.StaticMachine{
			{Name: "a", Address: "x", GPUs: "8xH100", PricePerHour: 7}, {Name: "b", Address: "y", GPUs: "8xH100", PricePerHour: 5}}}}}
	tests := map[string]struct {
		cur, want *manifest.Set
		wantRes   Result
	}{
		"nothing to nothing": {wantRes: Result{Changes: []Change{}}},
		"create a spot pool and a queue": {
			want: &manifest.Set{NodePools: []manifest.NodePool{simPool("gpu", 1, 4, model.Spot, model.OnDemand)}, Queues: []manifest.Queue{queue("q", 0)}},
			wantRes: Result{
				Changes: []Change{
					{Kind: "NodePool", Name: "gpu", Action: Create, Fields: []FieldChange{
						{Path: "spec.capacityTypes[0]", New: raw(`"spot"`)},
						{Path: "spec.capacityTypes[1]", New: raw(`"on-demand"`)},
						{Path: "spec.max", New: raw("4")},
						{Path: "spec.min", New: raw("1")},
						{Path: "spec.provider", New: raw(`"sim"`)},
					}, Cost: &Cost{MinPerHour: 30, MaxPerHour: 120, NodePerHour: 30, Offer: &spot}},
					{Kind: "Queue", Name: "q", Action: Create},
				},
				MinPerHour: 30, MaxPerHour: 120,
			},
		},
		"resize, delete and leave alone": {
			cur:  &manifest.Set{NodePools: []manifest.NodePool{simPool("gpu", 1, 4), static}, Queues: []manifest.Queue{queue("a", 1), queue("b", 1)}},
			want: &manifest.Set{NodePools: []manifest.NodePool{simPool("gpu", 2, 4), static}, Queues: []manifest.Queue{queue("a", 1)}},
			wantRes: Result{
				Changes: []Change{
					{Kind: "NodePool", Name: "gpu", Action: Update, Fields: []FieldChange{{Path: "spec.min", Old: raw("1"), New: raw("2")}},
						OldCost: &Cost{MinPerHour: 98, MaxPerHour: 392, NodePerHour: 98, Offer: &od},
						Cost:    &Cost{MinPerHour: 196, MaxPerHour: 392, NodePerHour: 98, Offer: &od}},
					{Kind: "Queue", Name: "b", Action: Delete},
				},
				// gpu: 2×98 … 4×98; owned: the cheapest machine … both.
				MinPerHour: 196 + 5, MaxPerHour: 392 + 12,
			},
		},
		"a pool of fixed capacity at a price per node": {
			want: &manifest.Set{NodePools: []manifest.NodePool{{APIVersion: manifest.APIVersion, Kind: manifest.KindNodePool, Metadata: manifest.ObjectMeta{Name: "owned"},
				Spec: model.NodePoolSpec{Provider: "racks", Min: 1, Max: 3}}}},
			wantRes: Result{Changes: []Change{{Kind: "NodePool", Name: "owned", Action: Create, Fields: []FieldChange{
				{Path: "spec.max", New: raw("3")},
				{Path: "spec.min", New: raw("1")},
				{Path: "spec.provider", New: raw(`"racks"`)},
			}, Cost: &Cost{NodePerHour: 4, MinPerHour: 4, MaxPerHour: 12}}}, MinPerHour: 4, MaxPerHour: 12},
		},
		"unpriceable pool": {
			want: &manifest.Set{NodePools: []manifest.NodePool{simPool("gpu", 0, 1, model.Reserved)}},
			wantRes: Result{Changes: []Change{{Kind: "NodePool", Name: "gpu", Action: Create, Fields: []FieldChange{
				{Path: "spec.capacityTypes[0]", New: raw(`"reserved"`)},
				{Path: "spec.max", New: raw("1")},
				{Path: "spec.min", New: raw("0")},
				{Path: "spec.provider", New: raw(`"sim"`)},
			}, Cost: &Cost{Unknown: "no catalog offer matches the pool's requirements, regions, instance types and capacity types"}}}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := Plan(tc.cur, tc.want, Pricing{Offers: offers, Pool: poolPrice})
			if diff := cmp.Diff(tc.wantRes, got); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDrift(t *testing.T) {
	t.Parallel()
	pools := []*model.NodePool{
		{Name: "gpu", Spec: model.NodePoolSpec{Provider: model.ProviderSim, Min: 2, Max: 3}},
		{Name: "owned", Spec: model.NodePoolSpec{Provider: model.ProviderStatic, Min: 0, Max: 1,
			Static: &model.StaticPoolSettings{Machines: []model.StaticMachine{{Name: "m1", Address: "10.0.0.1"}}}}},
	}
	nodes := []*model.Node{
		{ID: "n1", Name: "n1", Provider: "sim", Pool: "gpu", State: model.NodeReady},
		{ID: "n2", Name: "n2", Provider: "sim", Pool: "gpu", State: model.NodeLost},
		{ID: "n3", Name: "n3", Provider: "local", State: model.NodeReady},
		{ID: "n4", Name: "n4", Provider: "sim", Pool: "gpu", State: model.NodeTerminated},
		{ID: "box", Name: "lab-pc", Provider: "ssh", CapacityType: model.Owned, State: model.NodeReady},
	}
	got := Drift(World{
		Pools: pools, Nodes: nodes,
		Inventory:      map[string][]string{"sim": {"n2", "i-leak"}},
		Machines:       []model.Node{{ID: "m1", Pool: "owned", Provider: "static"}, {ID: "m2", Pool: "removed", Provider: "static"}},
		DeclaredQueues: map[string]model.QueueSpec{"a": {Weight: 2}, "b": {}},
		LiveQueues:     map[string]model.QueueSpec{"a": {Weight: 1}},
	})
	want := []Finding{
		{Kind: "Instance", Name: "i-leak", Issue: UnknownInstance, Detail: "provider sim lists instance i-leak, which no node stands for"},
		{Kind: "Node", Name: "box", Issue: UnmanagedNode, Detail: "owned machine box (agent lab-pc, provider ssh) is listed in no pool: add it to one, or stop its agent"},
		{Kind: "Node", Name: "n1", Issue: InstanceGone, Detail: "provider sim no longer lists instance n1 of node n1"},
		{Kind: "Node", Name: "n2", Issue: NodeLost, Detail: "node n2 of pool gpu stopped reporting (last heartbeat 0001-01-01T00:00:00Z)"},
		{Kind: "Node", Name: "n3", Issue: UnmanagedNode, Detail: "node n3 (local) belongs to no pool"},
		{Kind: "NodePool", Name: "gpu", Issue: BelowMin, Detail: "1 live nodes, min 2"},
		{Kind: "NodePool", Name: "owned", Issue: MachineMissing, Detail: "machine m1 (static) has no node; is its agent running?"},
		{Kind: "Queue", Name: "a", Issue: QueueChanged, Detail: "its spec differs from the declared one (changed with `gpufleet queues apply`?)"},
		{Kind: "Queue", Name: "b", Issue: QueueMissing, Detail: "declared but does not exist (deleted outside the fleet?)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Drift (-want +got):\n%s", diff)
	}
}
