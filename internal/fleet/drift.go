package fleet

import (
	"fmt"
	"reflect"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Issues a drift finding reports.
const (
	// BelowMin: a pool has fewer live nodes than its min.
	BelowMin = "below-min"
	// AboveMax: a pool has more live nodes than its max.
	AboveMax = "above-max"
	// NodeLost: a node of a pool stopped reporting.
	NodeLost = "node-lost"
	// InstanceGone: a live node's provider no longer lists its instance
	// (terminated outside gpufleet).
	InstanceGone = "instance-gone"
	// UnmanagedNode: a live node belongs to no declared pool.
	UnmanagedNode = "unmanaged-node"
	// UnknownInstance: a provider lists an instance no node stands for
	// (a leak, or capacity launched outside gpufleet).
	UnknownInstance = "unknown-instance"
	// MachineMissing: a machine a pool declares (a fixed-capacity
	// driver's: static, ssh) has no node (its agent never registered, or
	// was removed).
	MachineMissing = "machine-missing"
	// QueueMissing: a declared queue does not exist (deleted through the
	// queue API).
	QueueMissing = "queue-missing"
	// QueueChanged: a declared queue's live spec differs (changed through
	// the queue API).
	QueueChanged = "queue-changed"
)

// Finding is one difference between the declared and the running fleet.
type Finding struct {
	// Kind is NodePool, Node, Instance or Queue.
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Issue  string `json:"issue"`
	Detail string `json:"detail"`
}

// World is what drift compares: the declared pools and queues, and what
// runs.
type World struct {
	Pools          []*model.NodePool
	DeclaredQueues map[string]model.QueueSpec
	LiveQueues     map[string]model.QueueSpec
	Nodes          []*model.Node
	// Inventory maps a launching provider's name to the ids of the
	// instances it holds for gpufleet. Providers missing from it are not
	// checked for gone or unknown instances.
	Inventory map[string][]string
	// Machines are the machines fixed-capacity drivers declare
	// (provider.FixedCapacity.Machines), each with its pool: they are
	// checked against the nodes that registered, not as instances.
	Machines []model.Node
}

// Drift reports every difference between the declared fleet and the
// running one, ordered by kind, name and issue. It is pure.
func Drift(w World) []Finding {
	var out []Finding
	add := func(kind, name, issue, format string, args ...any) {
		out = append(out, Finding{Kind: kind, Name: name, Issue: issue, Detail: fmt.Sprintf(format, args...)})
	}
	pools := map[string]*model.NodePool{}
	for _, p := range w.Pools {
		pools[p.Name] = p
	}
	live := map[string]int{}
	byName := map[string]bool{}
	instanceOf := map[string]string{} // instance id → node id
	for _, n := range w.Nodes {
		if n.State == model.NodeTerminated {
			continue
		}
		id := n.ID
		if v := n.Labels[model.LabelInstance]; v != "" {
			id = v
		}
		instanceOf[id] = n.ID
		byName[n.Pool+"/"+n.Name] = true
		// An owned machine's node id is its machine name.
		byName[n.Pool+"/"+n.ID] = true
		if n.State == model.NodeLost {
			if n.Pool != "" {
				add("Node", n.ID, NodeLost, "node %s of pool %s stopped reporting (last heartbeat %s)", n.Name, n.Pool, n.LastHeartbeat.UTC().Format("2006-01-02T15:04:05Z"))
			}
			continue
		}
		if _, ok := pools[n.Pool]; !ok {
			if n.Pool == "" && n.CapacityType == model.Owned {
				add("Node", n.ID, UnmanagedNode, "owned machine %s (agent %s, provider %s) is listed in no pool: add it to one, or stop its agent", n.ID, n.Name, n.Provider)
			} else if n.Pool == "" {
				add("Node", n.ID, UnmanagedNode, "node %s (%s) belongs to no pool", n.Name, n.Provider)
			} else {
				add("Node", n.ID, UnmanagedNode, "node %s names pool %s, which is not declared", n.Name, n.Pool)
			}
		} else {
			live[n.Pool]++
		}
		if ids, checked := w.Inventory[n.Provider]; checked && !contains(ids, id) {
			add("Node", n.ID, InstanceGone, "provider %s no longer lists instance %s of node %s", n.Provider, id, n.Name)
		}
	}
	for _, p := range w.Pools {
		switch k := live[p.Name]; {
		case k < p.Spec.Min:
			add("NodePool", p.Name, BelowMin, "%d live nodes, min %d", k, p.Spec.Min)
		case k > p.Spec.Max:
			add("NodePool", p.Name, AboveMax, "%d live nodes, max %d", k, p.Spec.Max)
		}
	}
	for _, m := range w.Machines {
		if _, declared := pools[m.Pool]; declared && !byName[m.Pool+"/"+m.ID] {
			add("NodePool", m.Pool, MachineMissing, "machine %s (%s) has no node; is its agent running?", m.ID, m.Provider)
		}
	}
	for prov, ids := range w.Inventory {
		for _, id := range ids {
			if _, ok := instanceOf[id]; !ok {
				add("Instance", id, UnknownInstance, "provider %s lists instance %s, which no node stands for", prov, id)
			}
		}
	}
	for name, spec := range w.DeclaredQueues {
		liveSpec, ok := w.LiveQueues[name]
		switch {
		case !ok:
			add("Queue", name, QueueMissing, "declared but does not exist (deleted outside the fleet?)")
		case !reflect.DeepEqual(normQueue(spec), normQueue(liveSpec)):
			add("Queue", name, QueueChanged, "its spec differs from the declared one (changed with `gpufleet queues apply`?)")
		}
	}
	sortFindings(out)
	if out == nil {
		out = []Finding{}
	}
	return out
}

// normQueue makes an empty quota and a nil one equal.
func normQueue(s model.QueueSpec) model.QueueSpec {
	if len(s.Quota) == 0 {
		s.Quota = nil
	}
	return s
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
