package scheduler

import (
	"math/bits"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// maxNodeGPUs is the most GPUs per node the free masks track; GPUs with a
// higher index are never offered.
const maxNodeGPUs = 64

// cluster is the pass's working copy of free capacity. Nodes of the same
// shape (provider, region, placement group, GPU model and memory, count,
// capacity type, price, labels other than unique ones, topology) form a
// class, and a node a pending job selects by a unique label one of its own; each class keeps its
// nodes in buckets by free-GPU count, so finding the best-fitting node for
// a replica is a walk over at most 65 buckets, never over the nodes.
type cluster struct {
	snap    *state.Snapshot
	nodes   []nodeState
	classes []*class
	// domains name provider/region/placement group; a multi-node gang
	// stays inside one.
	domains []string
	// capacity is the ready GPUs per model, for dominant shares.
	capacity map[string]float64
	ready    int
	// shared is the held fraction per GPU position on shared nodes.
	shared map[int32][]float64
	// gen counts changes to what is free (setFree), so results computed
	// from it can be kept while it stays.
	gen uint64
}

// node returns the model node behind working node i.
func (c *cluster) node(i int32) *model.Node { return c.snap.Nodes[i].Node }

// nodeState is pointer-free, so the per-pass slice of 10,000 of them costs
// the garbage collector nothing; nodes[i] is snap.Nodes[i].
type nodeState struct {
	free  uint64
	nfree int32
	cls   int32
	pos   int32 // index in cls.buckets[nfree]
	cpu   float64
	mem   model.Bytes
}

type class struct {
	idx       int
	first     *model.Node
	nodes     []int32
	gpuModel  string
	gpuMem    model.Bytes
	size      int // GPUs per node (≤ maxNodeGPUs)
	price     float64
	gpuPrice  float64 // per GPU-hour
	groups    []uint64
	nvlink    bool // some NVLink group spans more than one GPU
	domain    int
	ready     bool
	shared    bool
	buckets   [][]int32
	freeTotal int
	// data is the digests of datasets pending jobs read that every node
	// of the class holds (data.go); nil for most classes.
	data map[string]bool
}

func newCluster(snap *state.Snapshot) *cluster {
	c := &cluster{snap: snap, nodes: make([]nodeState, len(snap.Nodes)), capacity: map[string]float64{}}
	byKey := map[string]*class{}
	// Nodes of one shape usually share their *model.Node GPU slice layout;
	// consecutive nodes often share a shape, so remember the last one.
	var lastNode *model.Node
	var lastClass *class
	var byShape []*class // by the state's interned ShapeID
	domains := map[string]int{}
	exc := uniqueSelected(snap.Pending)
	wanted := wantedData(snap.Pending)
	for i := range snap.Nodes {
		v := &snap.Nodes[i]
		n := v.Node
		var cl *class
		own := exceptional(n, exc)
		dk, held := heldKey(snap.Datasets[n.ID], wanted)
		if dk != "" {
			// It holds data a pending job reads: a class of its own
			// kind, so that the data scorer can prefer it.
			own += "\x01data=" + dk
		}
		switch {
		case own != "":
			// A pending job selects this node by a unique label: it gets a
			// class of its own, so the job's nodeSelector is matched
			// against this node and no other.
			key := shapeKey(v) + "\x00" + own
			cl = byKey[key]
			if cl == nil {
				cl = c.addClass(n, key, byKey, domains)
				cl.data = held
			}
		case v.ShapeID > 0 && v.ShapeID < len(byShape) && byShape[v.ShapeID] != nil:
			cl = byShape[v.ShapeID]
		case v.ShapeID == 0 && lastNode != nil && sameShape(lastNode, n):
			cl = lastClass
		default:
			key := shapeKey(v)
			cl = byKey[key]
			if cl == nil {
				cl = c.addClass(n, key, byKey, domains)
			}
			lastNode, lastClass = n, cl
			if v.ShapeID > 0 {
				for len(byShape) <= v.ShapeID {
					byShape = append(byShape, nil)
				}
				byShape[v.ShapeID] = cl
			}
		}
		ns := &c.nodes[i]
		ns.cls = int32(cl.idx)
		ns.cpu, ns.mem = v.FreeCPU, v.FreeMemory
		if cl.size > 0 {
			ns.free = v.FreeMask & (1<<uint(cl.size) - 1)
			if cl.size == maxNodeGPUs {
				ns.free = v.FreeMask
			}
		}
		if cl.shared && len(v.Shared) > 0 {
			sh := make([]float64, cl.size)
			for g, f := range v.Shared {
				if g >= 0 && g < cl.size {
					sh[g] = f
				}
			}
			if c.shared == nil {
				c.shared = map[int32][]float64{}
			}
			c.shared[int32(i)] = sh
		}
		ns.nfree = int32(bits.OnesCount64(ns.free))
		cl.nodes = append(cl.nodes, int32(i))
		if cl.ready {
			c.ready++
			ns.pos = int32(len(cl.buckets[ns.nfree]))
			cl.buckets[ns.nfree] = append(cl.buckets[ns.nfree], int32(i))
			cl.freeTotal += int(ns.nfree)
		}
	}
	for _, cl := range c.classes {
		if cl.ready && cl.size > 0 {
			c.capacity[cl.gpuModel] += float64(cl.size * len(cl.nodes))
		}
	}
	return c
}

// shapeKey is v's node's state.ShapeKey, interned by the state when it
// numbered the shape.
func shapeKey(v *state.NodeView) string {
	if v.ShapeID > 0 && v.Shape != "" {
		return v.Shape
	}
	return state.ShapeKey(v.Node)
}

func (c *cluster) addClass(n *model.Node, key string, byKey map[string]*class, domains map[string]int) *class {
	cl := newClass(n, len(c.classes))
	dk := n.Provider + "|" + n.Region + "|" + n.Labels[model.LabelPlacementGroup]
	d, ok := domains[dk]
	if !ok {
		d = len(c.domains)
		domains[dk] = d
		c.domains = append(c.domains, dk)
	}
	cl.domain = d
	byKey[key] = cl
	c.classes = append(c.classes, cl)
	return cl
}

// uniqueSelected is the unique labels (state.UniqueLabel) pending jobs
// select on, by key then value; nil when none does.
func uniqueSelected(pending []*model.Job) map[string]map[string]bool {
	var out map[string]map[string]bool
	for _, j := range pending {
		for k, v := range j.Spec.NodeSelector {
			if !state.UniqueLabel(k) {
				continue
			}
			if out == nil {
				out = map[string]map[string]bool{}
			}
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][v] = true
		}
	}
	return out
}

// exceptional returns the unique labels of n that some pending job
// selects, as sorted key=value pairs, or "".
func exceptional(n *model.Node, exc map[string]map[string]bool) string {
	if len(exc) == 0 {
		return ""
	}
	var pairs []string
	for k, vals := range exc {
		if v, ok := n.Labels[k]; ok && vals[v] {
			pairs = append(pairs, k+"="+v)
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "\x00")
}

// sameShape is a fast path for shapeKey equality on the pointer-level
// facts; it is conservative (false negatives only).
func sameShape(a, b *model.Node) bool {
	if a.Provider != b.Provider || a.Region != b.Region || a.State != b.State || a.CapacityType != b.CapacityType ||
		a.PricePerHour != b.PricePerHour || a.SharedGPUs != b.SharedGPUs || len(a.GPUs) != len(b.GPUs) ||
		len(a.Labels) != 0 || len(b.Labels) != 0 {
		return false
	}
	for i := range a.GPUs {
		x, y := a.GPUs[i], b.GPUs[i]
		if x.Model != y.Model || x.Memory != y.Memory || x.NVLinkGroup != y.NVLinkGroup || x.Index != y.Index {
			return false
		}
	}
	return true
}

func newClass(n *model.Node, idx int) *class {
	cl := &class{idx: idx, first: n, ready: n.State == model.NodeReady, shared: n.SharedGPUs, price: n.PricePerHour}
	size := len(n.GPUs)
	if size > maxNodeGPUs {
		size = maxNodeGPUs
	}
	cl.size = size
	if size > 0 {
		cl.gpuModel, cl.gpuMem = n.GPUs[0].Model, n.GPUs[0].Memory
		cl.gpuPrice = n.PricePerHour / float64(size)
	}
	groups := map[int]uint64{}
	var order []int
	for _, g := range n.GPUs {
		if g.Index < 0 || g.Index >= size {
			continue
		}
		if g.NVLinkGroup < 0 {
			continue
		}
		if _, ok := groups[g.NVLinkGroup]; !ok {
			order = append(order, g.NVLinkGroup)
		}
		groups[g.NVLinkGroup] |= 1 << uint(g.Index)
	}
	for _, o := range order {
		cl.groups = append(cl.groups, groups[o])
		if bits.OnesCount64(groups[o]) > 1 {
			cl.nvlink = true
		}
	}
	cl.buckets = make([][]int32, size+1)
	return cl
}

// setFree moves node i to the bucket of its new free mask.
func (c *cluster) setFree(i int32, free uint64) {
	c.gen++
	ns := &c.nodes[i]
	cl := c.classes[ns.cls]
	k := int32(bits.OnesCount64(free))
	if cl.ready && k != ns.nfree {
		b := cl.buckets[ns.nfree]
		last := b[len(b)-1]
		b[ns.pos] = last
		c.nodes[last].pos = ns.pos
		cl.buckets[ns.nfree] = b[:len(b)-1]
		ns.pos = int32(len(cl.buckets[k]))
		cl.buckets[k] = append(cl.buckets[k], i)
		cl.freeTotal += int(k - ns.nfree)
	}
	ns.free, ns.nfree = free, k
}

// pickGPUs chooses want GPUs from free on a node of class cl: the tightest
// NVLink group that holds them all (so big groups stay whole for big
// jobs), else, unless strict, the lowest free indexes. ok is false when
// nothing fits. oneGroup reports whether the choice sits in one group.
func (cl *class) pickGPUs(free uint64, want int, strict bool) (mask uint64, oneGroup, ok bool) {
	if bits.OnesCount64(free) < want {
		return 0, false, false
	}
	best, bestN := uint64(0), maxNodeGPUs+1
	for _, g := range cl.groups {
		n := bits.OnesCount64(free & g)
		if n >= want && n < bestN {
			best, bestN = free&g, n
		}
	}
	if bestN <= maxNodeGPUs {
		return lowest(best, want), true, true
	}
	if strict && cl.nvlink {
		return 0, false, false
	}
	return lowest(free, want), len(cl.groups) == 0, true
}

// lowest returns the want lowest set bits of m.
func lowest(m uint64, want int) uint64 {
	var out uint64
	for ; want > 0; want-- {
		b := m & -m
		out |= b
		m &^= b
	}
	return out
}

// indexes lists the set bits of m.
func indexes(m uint64) []int {
	out := make([]int, 0, bits.OnesCount64(m))
	for m != 0 {
		out = append(out, bits.TrailingZeros64(m))
		m &= m - 1
	}
	return out
}
