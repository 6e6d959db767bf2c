package state

import (
	"sort"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Snapshot is an immutable, consistent view of the state at one Version.
// Nothing in it may be modified.
type Snapshot struct {
	Version uint64
	// Pending holds queued jobs in acceptance order (Seq).
	Pending []*model.Job
	// Nodes are ordered by id.
	Nodes []NodeView
	// Live holds starting and running attempts, ordered by id.
	Live []*model.Attempt
}

// NodeView is a node and what is free on it.
type NodeView struct {
	Node *model.Node
	// Free lists the indexes of GPUs no live attempt holds, ascending.
	Free       []int
	FreeCPU    float64
	FreeMemory model.Bytes
	// AllocVersion changes whenever GPUs on the node are taken or freed.
	AllocVersion uint64
}

// Snapshot returns the current view. It copies only slices of pointers and
// the free-GPU lists; the objects are shared.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{Version: s.version, Pending: s.sortedPending()}
	snap.Nodes = make([]NodeView, 0, len(s.nodes))
	for _, e := range s.nodes {
		nv := NodeView{
			Node:         e.node,
			FreeCPU:      e.node.CPU - e.usedCPU,
			FreeMemory:   e.node.Memory - e.usedMem,
			AllocVersion: e.allocVersion,
		}
		for _, g := range e.node.GPUs {
			if e.holder[g.Index] == "" {
				nv.Free = append(nv.Free, g.Index)
			}
		}
		sort.Ints(nv.Free)
		snap.Nodes = append(snap.Nodes, nv)
	}
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Node.ID < snap.Nodes[j].Node.ID })
	snap.Live = s.LiveAttempts()
	return snap
}
