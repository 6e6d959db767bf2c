package fleet

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
)

func TestPoolCostOwned(t *testing.T) {
	ssh := model.NodePoolSpec{Provider: model.ProviderSSH, Min: 1, Max: 2, SSH: &model.SSHPoolSettings{Hosts: []model.SSHHost{
		{Name: "a", PricePerHour: 3}, {Name: "b", PricePerHour: 1}, {Name: "c", PricePerHour: 2},
	}}}
	static := model.NodePoolSpec{Provider: model.ProviderStatic, Min: 1, Max: 2, Static: &model.StaticPoolSettings{Machines: []model.StaticMachine{
		{Name: "a", PricePerHour: 3}, {Name: "b", PricePerHour: 1}, {Name: "c", PricePerHour: 2},
	}}}
	want := Cost{NodePerHour: 1, MinPerHour: 1, MaxPerHour: 3}
	for name, s := range map[string]model.NodePoolSpec{"ssh": ssh, "static": static} {
		if diff := cmp.Diff(want, PoolCost(s, nil)); diff != "" {
			t.Errorf("%s pool cost (-want +got):\n%s", name, diff)
		}
	}
	if c := PoolCost(model.NodePoolSpec{Provider: model.ProviderSSH}, nil); c.Unknown != "no hosts" {
		t.Errorf("an ssh pool without hosts costs %+v", c)
	}
}
