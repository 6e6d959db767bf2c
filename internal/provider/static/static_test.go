package static

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

func TestConformance(t *testing.T) {
	since := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for name, machines := range map[string][]Machine{
		"one box": {{Name: "box-1", GPU: "H100", GPUs: 8, GPUMemory: 80 * model.GiB, CPU: 96, Memory: 1024 * model.GiB, PricePerHour: 9.5}},
		"mixed rack": {
			{Name: "a100-1", GPU: "A100-80GB", GPUs: 4, GPUMemory: 80 * model.GiB, Address: "10.0.0.1", PricePerHour: 3},
			{Name: "a100-2", GPU: "A100-80GB", GPUs: 4, GPUMemory: 80 * model.GiB, Address: "10.0.0.2", PricePerHour: 3},
			{Name: "l4-1", GPU: "L4", GPUs: 1, GPUMemory: 24 * model.GiB, Region: "lab", Zone: "rack-2"},
			{Name: "cpu-1", CPU: 64},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := New(Config{Machines: machines}, since)
			if err != nil {
				t.Fatal(err)
			}
			providertest.Run(t, p, providertest.Options{}) // Fixed from Machines
		})
	}
}

func TestOffersAreDistinctAndPriced(t *testing.T) {
	p, err := New(Config{Machines: []Machine{
		{Name: "a", GPU: "H100", GPUs: 8, GPUMemory: 80 * model.GiB, PricePerHour: 9.5},
		{Name: "b", GPU: "H100", GPUs: 8, GPUMemory: 80 * model.GiB, PricePerHour: 9.5},
		{Name: "c", CPU: 8},
	}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Offer{{
		Provider: Name, Region: Region, InstanceType: "owned", GPU: "H100", GPUCount: 8, GPUMemory: 80 * model.GiB,
		CapacityType: model.Owned, PricePerHour: 9.5,
	}}
	if diff := cmp.Diff(want, offers); diff != "" {
		t.Errorf("offers (-want +got):\n%s", diff)
	}
	if _, err := p.Launch(context.Background(), provider.LaunchRequest{Offer: want[0]}); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Errorf("Launch error = %v, want ErrFixedCapacity", err)
	}
}

func TestValidate(t *testing.T) {
	known := func(m string) bool { return m == "H100" }
	tests := map[string]struct {
		cfg  Config
		want []string
	}{
		"valid": {cfg: Config{Machines: []Machine{{Name: "box-1", GPU: "H100", GPUs: 2}}}},
		"empty": {cfg: Config{}, want: []string{"spec.static.machines"}},
		"bad and duplicate names": {
			cfg:  Config{Machines: []Machine{{Name: "Box_1"}, {Name: "b"}, {Name: "b"}}},
			want: []string{"spec.static.machines[0].name", "spec.static.machines[2].name"},
		},
		"gpus without a model, unknown model, negatives": {
			cfg: Config{Machines: []Machine{
				{Name: "a", GPUs: 2},
				{Name: "b", GPU: "H900", GPUs: 1},
				{Name: "c", GPUs: -1, CPU: -1, Memory: -1, GPUMemory: -1, PricePerHour: -1, Address: "http://x/"},
			}},
			want: []string{
				"spec.static.machines[0].gpu", "spec.static.machines[1].gpu",
				"spec.static.machines[2].gpus", "spec.static.machines[2].gpuMemory", "spec.static.machines[2].cpu",
				"spec.static.machines[2].memory", "spec.static.machines[2].pricePerHour", "spec.static.machines[2].address",
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range tt.cfg.Validate("spec.static", known) {
				got = append(got, e.Path)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetPools: the provider follows the static pools of an applied fleet
// (other providers' pools ignored), passes the conformance suite with
// them, and keeps a machine's declaration time across applies.
func TestSetPools(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	pool := func(name string, machines ...model.StaticMachine) *model.NodePool {
		return &model.NodePool{Name: name, Spec: model.NodePoolSpec{Provider: model.ProviderStatic, Static: &model.StaticPoolSettings{Machines: machines}}}
	}
	sim := &model.NodePool{Name: "cloud", Spec: model.NodePoolSpec{Provider: model.ProviderSim}}
	p := NewPools([]*model.NodePool{sim, pool("rack", model.StaticMachine{Name: "a", Address: "10.0.0.1:7000", GPUs: "8xH100", PricePerHour: 9})}, t0)
	providertest.Run(t, p, providertest.Options{})

	p.SetPools([]*model.NodePool{pool("rack",
		model.StaticMachine{Name: "a", Address: "10.0.0.1:7000", GPUs: "8xH100", PricePerHour: 9},
		model.StaticMachine{Name: "b", Address: "gpu-b", GPUs: "2xL4", PricePerHour: 1})}, t0.Add(time.Hour))
	list, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Instance{
		{ID: "a", State: "running", LaunchedAt: t0, Labels: map[string]string{LabelAddress: "10.0.0.1", LabelPool: "rack"},
			Offer: model.Offer{Provider: Name, Region: Region, InstanceType: "owned", GPU: "H100", GPUCount: 8, CapacityType: model.Owned, PricePerHour: 9}},
		{ID: "b", State: "running", LaunchedAt: t0.Add(time.Hour), Labels: map[string]string{LabelAddress: "gpu-b", LabelPool: "rack"},
			Offer: model.Offer{Provider: Name, Region: Region, InstanceType: "owned", GPU: "L4", GPUCount: 2, CapacityType: model.Owned, PricePerHour: 1}},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List after SetPools (-want +got):\n%s", diff)
	}
	p.SetPools(nil, t0.Add(2*time.Hour))
	if list, _ := p.List(context.Background()); len(list) != 0 {
		t.Errorf("List after the pools are gone: %d machines", len(list))
	}
}

// TestCheckPool: a static pool's min and max default to its machines;
// each machine is checked with its field path; max is at most the
// machines.
func TestCheckPool(t *testing.T) {
	known := func(m string) bool { return m == "H100" }
	spec := model.NodePoolSpec{Provider: Name, Static: &model.StaticPoolSettings{Machines: []model.StaticMachine{
		{Name: "a", Address: "10.0.0.1", GPUs: "8xH100", PricePerHour: 10},
	}}}
	if fe := CheckPool(&spec, "spec", known); len(fe) > 0 || spec.Min != 1 || spec.Max != 1 {
		t.Fatalf("CheckPool: %v; min, max = %d, %d", fe, spec.Min, spec.Max)
	}
	spec.Max = 3
	spec.Static.Machines = append(spec.Static.Machines, model.StaticMachine{Name: "a", GPUs: "2xB999", PricePerHour: -1})
	var got []string
	for _, e := range CheckPool(&spec, "spec", known) {
		got = append(got, e.Path)
	}
	want := []string{"spec.static.machines[1].name", "spec.static.machines[1].address", "spec.static.machines[1].gpus", "spec.static.machines[1].pricePerHour", "spec.max"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problem paths (-want +got):\n%s", diff)
	}
	spec.Static = nil
	if fe := CheckPool(&spec, "spec", known); len(fe) != 1 || fe[0].Path != "spec.static.machines" {
		t.Errorf("no machines: %v", fe)
	}
}
