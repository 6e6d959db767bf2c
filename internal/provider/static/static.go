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
	"math"
	"net"
	"slices"
	"strings"
	"sync"
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

// LabelPool is the instance label naming the pool that declares a machine.
const LabelPool = "gpufleet.dev/pool"

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
	// Pool is the NodePool that declares it (SetPools); empty for
	// machines given to New.
	Pool string `json:"pool,omitempty"`
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

// CheckPool is the static driver's check of a pool (registry.Driver.Check):
// min and max default to the number of machines, the pool lists at least
// one machine in its static block, each valid (knownGPU, when not nil,
// checks GPU models against the catalog), with field paths under prefix
// (spec.static.machines[1].gpus), and max is at most the machines listed.
func CheckPool(spec *model.NodePoolSpec, prefix string, knownGPU func(string) bool) model.FieldErrors {
	var fe model.FieldErrors
	p := func(f string) string { return prefix + "." + f }
	if spec.Static == nil || len(spec.Static.Machines) == 0 {
		fe.Add(p("static.machines"), "a static pool lists at least one machine")
		return fe
	}
	if spec.Min == 0 && spec.Max == 0 {
		spec.Min, spec.Max = len(spec.Static.Machines), len(spec.Static.Machines)
	}
	seen := map[string]int{}
	for i, m := range spec.Static.Machines {
		mp := fmt.Sprintf("%s[%d]", p("static.machines"), i)
		if !model.ValidName(m.Name) {
			fe.Add(mp+".name", "must be lower-case letters, digits and dashes (at most 63)")
		} else if j, dup := seen[m.Name]; dup {
			fe.Add(mp+".name", fmt.Sprintf("%q is also machine %d", m.Name, j))
		} else {
			seen[m.Name] = i
		}
		if strings.TrimSpace(m.Address) == "" {
			fe.Add(mp+".address", "is required (host:port of the machine's agent, or its host name)")
		}
		if _, gpu, err := model.ParseGPUCount(m.GPUs); err != nil {
			fe.Add(mp+".gpus", err.Error())
		} else if knownGPU != nil && !knownGPU(gpu) {
			fe.Add(mp+".gpus", fmt.Sprintf("unknown GPU model %q (see `gpufleet offers` for the catalog's models)", gpu))
		}
		if math.IsNaN(m.PricePerHour) || math.IsInf(m.PricePerHour, 0) || m.PricePerHour < 0 {
			fe.Add(mp+".pricePerHour", "must be a non-negative number of USD per hour")
		}
	}
	if spec.Max > len(spec.Static.Machines) {
		fe.Add(p("max"), fmt.Sprintf("must be at most the %d machines listed", len(spec.Static.Machines)))
	}
	return fe
}

// Provider describes a set of owned machines: fixed by New, or following
// the static NodePools of the applied fleet (NewPools, SetPools). It is safe
// for concurrent use; each call sees one whole set.
type Provider struct {
	mu       sync.Mutex
	machines []Machine
	since    map[string]time.Time // by machine name: when it was declared
}

var (
	_ provider.Provider      = (*Provider)(nil)
	_ provider.FixedCapacity = (*Provider)(nil)
	_ provider.Adopter       = (*Provider)(nil)
)

// New returns the provider of cfg's machines, refusing an invalid cfg.
// since is reported as the machines' launch time (when the pool was
// declared).
func New(cfg Config, since time.Time) (*Provider, error) {
	if fe := cfg.Validate("static", nil); len(fe) > 0 {
		return nil, fmt.Errorf("configuring static provider: %w", fe.Err())
	}
	p := &Provider{}
	p.set(cfg.Machines, since)
	return p, nil
}

// NewPools returns the provider of the machines the static pools among
// pools declare; with none it has no machines until SetPools gives some.
func NewPools(pools []*model.NodePool, now time.Time) *Provider {
	p := &Provider{}
	p.SetPools(pools, now)
	return p
}

// SetPools makes the provider's machines those of the static pools among
// pools (an applied fleet revision), in pool then machine order; a machine
// listed twice counts once, in its first pool. A machine that stays keeps
// the time it was first declared; a new one is declared at now. Machines
// whose gpus do not parse ("COUNTxMODEL") are left out: manifest
// validation refuses them before an apply.
func (p *Provider) SetPools(pools []*model.NodePool, now time.Time) {
	p.set(Machines(pools), now)
}

// Machines converts the machines of the static pools among pools.
func Machines(pools []*model.NodePool) []Machine {
	var out []Machine
	seen := map[string]bool{}
	for _, pool := range pools {
		if pool.Spec.Provider != model.ProviderStatic || pool.Spec.Static == nil {
			continue
		}
		for _, m := range pool.Spec.Static.Machines {
			count, gpu, err := model.ParseGPUCount(m.GPUs)
			if err != nil || seen[m.Name] {
				continue
			}
			seen[m.Name] = true
			out = append(out, Machine{Name: m.Name, Pool: pool.Name, Address: hostOf(m.Address), GPU: gpu, GPUs: count, PricePerHour: m.PricePerHour})
		}
	}
	return out
}

// hostOf drops a port from a pool's machine address ("host:port" of its
// agent, or a host name): MASTER_ADDR is a host.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func (p *Provider) set(machines []Machine, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := make(map[string]time.Time, len(machines))
	for _, m := range machines {
		if t, ok := p.since[m.Name]; ok {
			since[m.Name] = t
		} else {
			since[m.Name] = now
		}
	}
	p.machines, p.since = slices.Clone(machines), since
}

// snapshot returns the current machines; the slice is never modified.
func (p *Provider) snapshot() ([]Machine, map[string]time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.machines, p.since
}

// Declared returns the pool that declares machine id (its first, when two
// list it) and the machine's price per hour.
func (p *Provider) Declared(id string) (pool string, pricePerHour float64, ok bool) {
	machines, _ := p.snapshot()
	for _, m := range machines {
		if m.Name == id {
			return m.Pool, m.PricePerHour, true
		}
	}
	return "", 0, false
}

// Name returns "static".
func (p *Provider) Name() string { return Name }

// Offers lists the distinct offers of the machines that have GPUs: owned
// capacity at its amortised price.
func (p *Provider) Offers(context.Context) ([]model.Offer, error) {
	machines, _ := p.snapshot()
	var out []model.Offer
	for _, m := range machines {
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
	machines, since := p.snapshot()
	out := make([]provider.Instance, 0, len(machines))
	for _, m := range machines {
		in := provider.Instance{ID: m.Name, Offer: offer(m), State: "running", LaunchedAt: since[m.Name], Labels: labels(m)}
		out = append(out, in)
	}
	return out, nil
}

// labels are a machine's address and pool, nil when it has neither.
func labels(m Machine) map[string]string {
	var l map[string]string
	put := func(k, v string) {
		if v != "" {
			if l == nil {
				l = map[string]string{}
			}
			l[k] = v
		}
	}
	put(LabelAddress, m.Address)
	put(LabelPool, m.Pool)
	return l
}

// Machines returns the declared machines as the nodes they will be.
func (p *Provider) Machines(context.Context) ([]model.Node, error) {
	machines, _ := p.snapshot()
	out := make([]model.Node, 0, len(machines))
	for _, m := range machines {
		n := model.Node{
			ID: m.Name, Name: m.Name, Provider: Name, Pool: m.Pool, Region: region(m), Zone: m.Zone,
			CPU: m.CPU, Memory: m.Memory, CapacityType: model.Owned, PricePerHour: m.PricePerHour, Labels: labels(m),
		}
		for i := range m.GPUs {
			n.GPUs = append(n.GPUs, model.GPU{Index: i, Model: m.GPU, Memory: m.GPUMemory})
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

// PoolPrice prices a static pool from its spec: its machines exist, each at
// its declared price (provider.PoolPricer).
func PoolPrice(s model.NodePoolSpec) provider.PoolPrice {
	if s.Static == nil || len(s.Static.Machines) == 0 {
		return provider.PoolPrice{Unknown: "no machines"}
	}
	prices := make([]float64, len(s.Static.Machines))
	for i, m := range s.Static.Machines {
		prices[i] = m.PricePerHour
	}
	return provider.PoolPrice{Fixed: true, NodePrices: prices}
}
