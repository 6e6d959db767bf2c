package model

import "time"

// NodeState is where a machine is in its life.
type NodeState string

// Node states.
const (
	NodeLaunching  NodeState = "launching"
	NodeReady      NodeState = "ready"
	NodeDraining   NodeState = "draining"
	NodeTerminated NodeState = "terminated"
	NodeLost       NodeState = "lost"
)

// CapacityType is how capacity is bought.
type CapacityType string

// Capacity types. Owned machines are "owned": bought outright.
const (
	OnDemand CapacityType = "on-demand"
	Spot     CapacityType = "spot"
	Reserved CapacityType = "reserved"
	Owned    CapacityType = "owned"
)

// Node is one machine with GPUs. Treat a published *Node as immutable.
type Node struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Provider     string            `json:"provider"`
	Pool         string            `json:"pool,omitempty"`
	State        NodeState         `json:"state"`
	GPUs         []GPU             `json:"gpus"`
	CPU          float64           `json:"cpu"`
	Memory       Bytes             `json:"memory"`
	Labels       map[string]string `json:"labels,omitempty"`
	Region       string            `json:"region,omitempty"`
	Zone         string            `json:"zone,omitempty"`
	InstanceType string            `json:"instanceType,omitempty"`
	CapacityType CapacityType      `json:"capacityType,omitempty"`
	PricePerHour float64           `json:"pricePerHour,omitempty"`
	// GPUSource says where the GPU list came from: nvml, nvidia-smi, fake or none.
	GPUSource string `json:"gpuSource,omitempty"`
	// SharedGPUs is set when the node's pool marks its GPUs shareable:
	// jobs asking for a fraction of a GPU are packed onto them, and
	// whole-GPU jobs never land on them.
	SharedGPUs bool `json:"sharedGpus,omitempty"`
	// Runtimes and NotIsolated are what the node's runner declared
	// (agentapi.Registration): jobs with run.image need RuntimeContainer,
	// and only admins' jobs run on a node that is not isolated.
	Runtimes    []string `json:"runtimes,omitempty"`
	NotIsolated bool     `json:"notIsolated,omitempty"`
	// Driver is the node's NVIDIA driver version ("550.54.15"), empty
	// when unknown (no driver, fake GPUs).
	Driver        string    `json:"driver,omitempty"`
	RegisteredAt  time.Time `json:"registeredAt"`
	LastHeartbeat time.Time `json:"lastHeartbeat"`
	// LaunchedAt and StoppedAt are when the node's provider started and
	// stopped billing its instance (its own times); the ledger meters the
	// node over exactly that span, boot time included as idle. Zero
	// LaunchedAt: no provider bills it (metered from RegisteredAt); zero
	// StoppedAt: still billed. A machine lost without an instance has
	// StoppedAt at its loss.
	LaunchedAt time.Time `json:"launchedAt,omitzero"`
	StoppedAt  time.Time `json:"stoppedAt,omitzero"`
	// InterruptionRate and RestartTime are those of the offer a spot node
	// was launched from (0: unknown), for the deadline rule.
	InterruptionRate float64  `json:"interruptionRate,omitempty"`
	RestartTime      Duration `json:"restartTime,omitempty"`
	Version          uint64   `json:"version"`
}

// Clone returns a deep copy.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUs = append([]GPU(nil), n.GPUs...)
	c.Runtimes = append([]string(nil), n.Runtimes...)
	if n.Labels != nil {
		c.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			c.Labels[k] = v
		}
	}
	return &c
}

// Runtimes a node may declare.
const (
	RuntimeProcess   = "process"
	RuntimeContainer = "container"
)

// HasRuntime reports whether n declared runtime r.
func (n *Node) HasRuntime(r string) bool {
	for _, x := range n.Runtimes {
		if x == r {
			return true
		}
	}
	return false
}

// GPU is one device on a node.
type GPU struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Model  string `json:"model"`
	Memory Bytes  `json:"memory"`
	// NVLinkGroup numbers the GPUs that share an NVLink/NVSwitch domain on
	// the node; -1 means PCIe only.
	NVLinkGroup int `json:"nvlinkGroup"`
}

// Offer is capacity that can be bought now (DESIGN.md §2). Owned capacity is
// an offer with an amortised price.
type Offer struct {
	Provider     string       `json:"provider"`
	Region       string       `json:"region"`
	Zone         string       `json:"zone,omitempty"`
	InstanceType string       `json:"instanceType"`
	GPU          string       `json:"gpu"`
	GPUCount     int          `json:"gpuCount"`
	GPUMemory    Bytes        `json:"gpuMemory"`
	VCPUs        float64      `json:"vcpus,omitempty"`
	Memory       Bytes        `json:"memory,omitempty"`
	CapacityType CapacityType `json:"capacityType"`
	PricePerHour float64      `json:"pricePerHour"`
	// PriceAsOf, when set, is when a provider's live price source
	// (provider.PriceSource) read PricePerHour; zero: the embedded
	// catalog's snapshot price.
	PriceAsOf time.Time `json:"priceAsOf,omitzero"`
	// InterruptionRate is the expected interruptions per instance-hour
	// (spot only; 0 when unknown or not spot).
	InterruptionRate float64 `json:"interruptionRate,omitempty"`
	// RestartTime is the restartTime of the pool that would launch it
	// (0: unset), for the deadline rule.
	RestartTime  Duration `json:"restartTime,omitempty"`
	Interconnect string   `json:"interconnect,omitempty"`
	// PlacementGroup, when set, is the cluster placement group instances of
	// this offer launch into.
	PlacementGroup string `json:"placementGroup,omitempty"`
}

// LabelPlacementGroup is the node label naming the placement group a
// node was launched in; a multi-node gang stays inside one.
const LabelPlacementGroup = "gpufleet.dev/placement-group"

// PricePerGPUHour is the offer's hourly price divided by its GPUs.
func (o Offer) PricePerGPUHour() float64 {
	if o.GPUCount == 0 {
		return o.PricePerHour
	}
	return o.PricePerHour / float64(o.GPUCount)
}
