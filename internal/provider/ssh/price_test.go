package ssh

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/fleet"
	"github.com/gpufleet/gpufleet/internal/model"
)

// An ssh pool is priced like owned machines: the cheapest hosts first.
func TestPoolPriceFromHosts(t *testing.T) {
	s := model.NodePoolSpec{Provider: model.ProviderSSH, Min: 1, Max: 2, SSH: &model.SSHPoolSettings{Hosts: []model.SSHHost{
		{Name: "a", PricePerHour: 3}, {Name: "b", PricePerHour: 1}, {Name: "c", PricePerHour: 2},
	}}}
	pr := fleet.Pricing{Pool: PoolPrice}
	if diff := cmp.Diff(fleet.Cost{NodePerHour: 1, MinPerHour: 1, MaxPerHour: 3}, fleet.PoolCost(s, pr)); diff != "" {
		t.Errorf("ssh pool cost (-want +got):\n%s", diff)
	}
	if c := fleet.PoolCost(model.NodePoolSpec{Provider: model.ProviderSSH}, pr); c.Unknown != "no hosts" {
		t.Errorf("an ssh pool without hosts costs %+v", c)
	}
}
