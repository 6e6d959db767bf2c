package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// NodeInfo is model.NodeInfo, declared there so the API and its client need
// not import the controller.
type NodeInfo = model.NodeInfo

// InUse is model.HolderInUse, declared there so the API and its client need
// not import the controller.
const InUse = model.HolderInUse

// GPUHolder is model.GPUHolder, declared there so the API and its client
// need not import the controller.
type GPUHolder = model.GPUHolder

// Nodes lists every node, ordered by id, with every holder named: callers
// outside the controller show each user Redacted views.
func (c *Controller) Nodes() []NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := c.st.Nodes()
	out := make([]NodeInfo, len(nodes))
	for i, n := range nodes {
		out[i] = NodeInfo{Node: n, TelemetrySource: c.tel.Source(n.ID)}
		out[i].Billed, out[i].BilledSource = c.nodePrice(n)
		if t, ok := c.tel.Latest(n.ID); ok {
			out[i].Telemetry = &t
		}
		for _, g := range n.GPUs {
			id := c.st.GPUHolder(n.ID, g.Index)
			if id == "" {
				continue
			}
			if out[i].GPUHolders == nil {
				out[i].GPUHolders, out[i].Holders = map[int]string{}, map[int]GPUHolder{}
			}
			h := GPUHolder{AttemptID: id, InUse: true}
			if a, ok := c.st.Attempt(id); ok {
				h.JobID = a.JobID
				if j, ok := c.st.Job(a.JobID); ok {
					h.Project, h.User = j.Project, j.User
				}
			}
			out[i].GPUHolders[g.Index], out[i].Holders[g.Index] = id, h
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

// RetireNode ends node id now, as the heartbeat timeout would later: the
// node is lost, and so are its unfinished replicas, whose attempts requeue
// at once. It is for a runner that knows its node is gone (a Kubernetes
// pool's virtual nodes when the pool is removed); why is recorded in the
// node-lost event. A node that registers again is back. A node already
// lost or terminated is left as it is. Errors: ErrNotFound for an unknown
// node; an error when the change could not be recorded.
func (c *Controller) RetireNode(ctx context.Context, id, why string) error {
	c.mu.Lock()
	n, ok := c.st.Node(id)
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("retiring node %s: %w", id, ErrNotFound)
	}
	if n.State != model.NodeReady && n.State != model.NodeDraining {
		c.mu.Unlock()
		return nil
	}
	b := &store.Batch{}
	c.cfg.Log.Info("node retired", "node_id", id, "reason", why)
	c.loseNodeLocked(n, b, c.cfg.Clock.Now(), why)
	c.broadcastLocked()
	cm := c.com.submit(b)
	c.mu.Unlock()
	if err := cm.wait(ctx); err != nil {
		return fmt.Errorf("retiring node %s: %w", id, err)
	}
	c.trigger()
	return nil
}

// loseNodeLocked marks n lost, with an event saying why, and its unfinished
// replicas with it, settling their attempts (which requeue).
func (c *Controller) loseNodeLocked(n *model.Node, b *store.Batch, now time.Time, why string) {
	n = n.Clone()
	n.State = model.NodeLost
	n.Version++
	if n.Labels[model.LabelInstance] == "" {
		// No provider bills it on: metered up to now, then no more.
		// (An instance is billed until its provider stops it.)
		n.StoppedAt = now
	}
	c.st.PutNode(n)
	b.Nodes = append(b.Nodes, n)
	c.forgetAgentLocked(n.ID)
	c.recordLocked(b, model.Event{Kind: model.EventNodeLost, Object: "node/" + n.ID, Node: n.ID, Provider: n.Provider, Region: n.Region,
		Message: why})
	// The node's live attempts, from the state's per-node index, in id
	// order (settling them changes the index, so they are gathered first).
	var on []*model.Attempt
	c.st.LiveAttemptsOn(n.ID, func(a *model.Attempt) bool { on = append(on, a); return true })
	sort.Slice(on, func(i, j int) bool { return on[i].ID < on[j].ID })
	for _, a := range on {
		changed := false
		a = a.Clone()
		for i, r := range a.Replicas {
			if r.NodeID == n.ID && !r.State.Terminal() {
				a.Replicas[i].State, a.Replicas[i].Reason = model.AttemptLost, model.ReasonNodeLost
				changed = true
			}
		}
		if changed {
			a.Version++
			c.settleLocked(a, b, now)
		}
	}
}

// NodeStatus is what a long-polling agent of node id learns without a
// sync: its desired set's generation (a sync while it is unchanged returns
// the same set) and the node's state. Simulated agents poll it instead of
// blocking in Sync; ok is false for an unknown node.
func (c *Controller) NodeStatus(id string) (gen uint64, state model.NodeState, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.st.Node(id)
	if !ok {
		return 0, "", false
	}
	return c.nodeGen.get(id), n.State, true
}

// MovedNodes lets a host of in-process agents poll only the nodes that
// changed rather than each node's NodeStatus: it appends to ids the nodes
// whose desired set moved since the last call (in no order; the first
// call starts the tracking and lists none), and returns a number that
// changes whenever a node registers or any node's state changes. An
// agent whose node is not listed, while that number is the same, would
// learn nothing new from NodeStatus.
func (c *Controller) MovedNodes(ids []string) ([]string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodeGen.takeMoved(ids), c.st.NodeStateGen()
}
