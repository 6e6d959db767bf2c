package controller

import (
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// NodeInfo is a node with what is in use on it.
type NodeInfo struct {
	*model.Node
	// GPUHolders maps GPU index to the attempt holding it.
	GPUHolders map[int]string `json:"gpuHolders,omitempty"`
	// TelemetrySource is what reads the node's GPUs ("nvml", …,
	// "simulated" for demo GPUs, "none"); Telemetry is its newest sample.
	TelemetrySource string                    `json:"telemetrySource,omitempty"`
	Telemetry       *agentapi.TelemetrySample `json:"telemetry,omitempty"`
}

// Nodes lists every node, ordered by id.
func (c *Controller) Nodes() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := c.st.Nodes()
	out := make([]NodeInfo, len(nodes))
	for i, n := range nodes {
		out[i] = NodeInfo{Node: n, TelemetrySource: c.tel.source[n.ID]}
		if t, ok := c.tel.latest[n.ID]; ok {
			out[i].Telemetry = &t
		}
		for _, g := range n.GPUs {
			if h := c.st.GPUHolder(n.ID, g.Index); h != "" {
				if out[i].GPUHolders == nil {
					out[i].GPUHolders = map[int]string{}
				}
				out[i].GPUHolders[g.Index] = h
			}
		}
	}
	return out
}

// JobCounts returns the number of jobs in each state.
func (c *Controller) JobCounts() map[model.JobState]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Counts()
}
