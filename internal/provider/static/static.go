// Package static is the provider of owned machines (DESIGN.md §4): a fixed
// list of hosts, declared in a NodePool of provider static, each running
// `gpufleet agent` and connecting to the server over HTTP(S). gpufleet
// cannot launch or power off these machines; the driver describes them, so
// the scheduler can count their GPUs and the cost ledger can charge their
// amortised price.
//
// A machine's Name is its node id: the subject of the agent token created
// for it (`gpufleet tokens create NAME --kind agent`) and the id its agent
// registers as, which ties the declaration to the running node.
package static

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Name is the provider name of owned machines.
const Name = "static"

// Region is the region of a machine that declares none.
const Region = "owned"

// LabelAddress is the node label holding the address other machines reach
// a node at; the controller hands it to gangs as MASTER_ADDR.
const LabelAddress = "gpufleet.dev/address"

// Machine is one owned host as a pool declares it.
type Machine struct {
	// Name is the node id its agent registers as (required; lower-case
	// letters, digits and dashes, at most 63).
	Name string `json:"name"`
	// Address is where other machines reach it (host name or IP), used as
	// MASTER_ADDR for gangs. Optional: the agent reports its own.
	Address string `json:"address,omitempty"`
	// GPU is the catalog model of its GPUs and GPUs their count (0 for a
	// CPU-only machine).
	GPU  string `json:"gpu,omitempty"`
	GPUs int    `json:"gpus,omitempty"`
	// GPUMemory is each GPU's memory; zero takes the catalog's.
	GPUMemory model.Bytes `json:"gpuMemory,omitempty"`
	CPU       float64     `json:"cpu,omitempty"`
	Memory    model.Bytes `json:"memory,omitempty"`
	// PricePerHour is the machine's amortised cost (purchase, power,
	// hosting) in dollars per hour; it is what the cost ledger charges.
	PricePerHour float64 `json:"pricePerHour,omitempty"`
	// Region and Zone place it for region policies (default Region).
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// Config is the static provider's part of a NodePool: its machines.
type Config struct {
	Machines []Machine `json:"machines"`
}

// Validate reports every problem at once with its field path under prefix
// (e.g. "spec.static"). knownGPU, when not nil, checks GPU models against the
// catalog.
func (c Config) Validate(prefix string, knownGPU func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	if len(c.Machines) == 0 {
		fe.Add(prefix+".machines", "must list at least one machine")
	}
	seen := map[string]bool{}
	for i, m := range c.Machines {
		p := fmt.Sprintf("%s.machines[%d]", prefix, i)
		switch {
		case !model.ValidName(m.Name):
			fe.Add(p+".name", "must be 1 to 63 lower-case letters, digits and dashes (it is the node id its agent registers as)")
		case seen[m.Name]:
			fe.Add(p+".name", fmt.Sprintf("%q is declared twice", m.Name))
		}
		seen[m.Name] = true
		if m.GPUs < 0 {
			fe.Add(p+".gpus", "must not be negative")
		}
		if m.GPUs > 0 && m.GPU == "" {
			fe.Add(p+".gpu", "is required when gpus > 0")
		}
		if m.GPU != "" && knownGPU != nil && !knownGPU(m.GPU) {
			fe.Add(p+".gpu", fmt.Sprintf("unknown GPU model %q (see `gpufleet offers`)", m.GPU))
		}
		if m.GPUMemory < 0 {
			fe.Add(p+".gpuMemory", "must not be negative")
		}
		if m.CPU < 0 {
			fe.Add(p+".cpu", "must not be negative")
		}
		if m.Memory < 0 {
			fe.Add(p+".memory", "must not be negative")
		}
		if m.PricePerHour < 0 {
			fe.Add(p+".pricePerHour", "must not be negative")
		}
		if strings.ContainsAny(m.Address, " /") {
			fe.Add(p+".address", "must be a host name or IP address")
		}
	}
	return fe
}

// Provider describes a fixed set of owned machines. It is immutable and safe
// for concurrent use.
type Provider struct {
	machines []Machine
	since    time.Time
}

var (
	_ provider.Provider      = (*Provider)(nil)
	_ provider.FixedCapacity = (*Provider)(nil)
)

// New returns the provider of cfg's machines, refusing an invalid cfg.
// since is reported as the machines' launch time (when the pool was
// declared).
func New(cfg Config, since time.Time) (*Provider, error) {
	if fe := cfg.Validate("static", nil); len(fe) > 0 {
		return nil, fmt.Errorf("configuring static provider: %w", fe.Err())
	}
	return &Provider{machines: slices.Clone(cfg.Machines), since: since}, nil
}

// Name returns "static".
func (p *Provider) Name() string { return Name }

// Offers lists the distinct offers of the machines that have GPUs: owned
// capacity at its amortised price.
func (p *Provider) Offers(context.Context) ([]model.Offer, error) {
	var out []model.Offer
	for _, m := range p.machines {
		if o := offer(m); o.GPUCount > 0 && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// Launch always fails: owned machines exist already.
func (p *Provider) Launch(_ context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, fmt.Errorf("launching %s on %s (add a machine to the pool and start its agent instead): %w", req.Offer.InstanceType, Name, provider.ErrFixedCapacity)
}

// Terminate always fails: gpufleet does not power off owned machines.
func (p *Provider) Terminate(_ context.Context, id string) error {
	return fmt.Errorf("terminating %s on %s (remove it from the pool and stop its agent instead): %w", id, Name, provider.ErrFixedCapacity)
}

// List returns one running instance per machine, its id the node id.
func (p *Provider) List(context.Context) ([]provider.Instance, error) {
	out := make([]provider.Instance, 0, len(p.machines))
	for _, m := range p.machines {
		in := provider.Instance{ID: m.Name, Offer: offer(m), State: "running", LaunchedAt: p.since}
		if m.Address != "" {
			in.Labels = map[string]string{LabelAddress: m.Address}
		}
		out = append(out, in)
	}
	return out, nil
}

// Machines returns the declared machines as the nodes they will be.
func (p *Provider) Machines(context.Context) ([]model.Node, error) {
	out := make([]model.Node, 0, len(p.machines))
	for _, m := range p.machines {
		n := model.Node{
			ID: m.Name, Name: m.Name, Provider: Name, Region: region(m), Zone: m.Zone,
			CPU: m.CPU, Memory: m.Memory, CapacityType: model.Owned,
		}
		for i := range m.GPUs {
			n.GPUs = append(n.GPUs, model.GPU{Index: i, Model: m.GPU, Memory: m.GPUMemory})
		}
		if m.Address != "" {
			n.Labels = map[string]string{LabelAddress: m.Address}
		}
		out = append(out, n)
	}
	return out, nil
}

func region(m Machine) string {
	if m.Region == "" {
		return Region
	}
	return m.Region
}

// offer is what a machine sells: all its GPUs, at its amortised price.
func offer(m Machine) model.Offer {
	o := model.Offer{
		Provider: Name, Region: region(m), Zone: m.Zone, InstanceType: "owned",
		VCPUs: m.CPU, Memory: m.Memory, CapacityType: model.Owned, PricePerHour: m.PricePerHour,
	}
	if m.GPUs > 0 {
		o.GPU, o.GPUCount, o.GPUMemory = m.GPU, m.GPUs, m.GPUMemory
	}
	return o
}
