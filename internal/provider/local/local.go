// Package local is the provider for the machine gpufleet runs on: fixed
// capacity of one node whose GPUs the in-process agent discovered. It cannot
// launch or terminate machines; its offer and inventory describe that node.
package local

import (
	"context"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Name is the provider name of this machine's node.
const Name = "local"

// Region is the region the local node reports, so region policies can name it.
const Region = "local"

// Provider describes this machine.
type Provider struct {
	hostname string
	gpus     []model.GPU
	cpu      float64
	memory   model.Bytes
	started  time.Time
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider for a machine with the given facts.
func New(hostname string, gpus []model.GPU, cpu float64, memory model.Bytes, started time.Time) *Provider {
	return &Provider{hostname: hostname, gpus: append([]model.GPU(nil), gpus...), cpu: cpu, memory: memory, started: started}
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// Offers returns this machine as one owned offer (none when it has no GPUs:
// CPU-only work still runs on it, but it sells no GPU capacity).
func (p *Provider) Offers(context.Context) ([]model.Offer, error) {
	if len(p.gpus) == 0 {
		return nil, nil
	}
	return []model.Offer{p.offer()}, nil
}

func (p *Provider) offer() model.Offer {
	o := model.Offer{
		Provider:     Name,
		Region:       Region,
		InstanceType: "local",
		VCPUs:        p.cpu,
		Memory:       p.memory,
		CapacityType: model.Owned,
	}
	if len(p.gpus) > 0 {
		o.GPU, o.GPUCount, o.GPUMemory = p.gpus[0].Model, len(p.gpus), p.gpus[0].Memory
	}
	return o
}

// Launch always fails: this machine already exists.
func (p *Provider) Launch(context.Context, provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, fmt.Errorf("launching on %s: %w", Name, provider.ErrFixedCapacity)
}

// Terminate always fails: gpufleet does not power off its own host.
func (p *Provider) Terminate(_ context.Context, id string) error {
	return fmt.Errorf("terminating %s on %s: %w", id, Name, provider.ErrFixedCapacity)
}

// List returns the one instance: this machine.
func (p *Provider) List(context.Context) ([]provider.Instance, error) {
	return []provider.Instance{{ID: p.hostname, Offer: p.offer(), State: "running", LaunchedAt: p.started}}, nil
}

// PoolPrice prices a local pool: this machine, free (provider.PoolPricer).
func PoolPrice(model.NodePoolSpec) provider.PoolPrice { return provider.PoolPrice{Fixed: true} }
