package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
)

// DefaultRegion is the region of nodes without a topology.kubernetes.io/region
// label; region policies can name it.
const DefaultRegion = "kubernetes"

// Instance types of an offer whose nodes name none, or several.
const (
	instanceTypeNone  = "kubernetes"
	instanceTypeMixed = "mixed"
)

// groupKey is what nodes of one virtual node share: the GPU model as the
// catalog names it, the capacity type, and the raw region and zone labels
// ("" when a node has none).
type groupKey struct {
	Model        string
	CapacityType model.CapacityType
	Region       string
	Zone         string
}

// maxChunkGPUs is the most GPUs one virtual node holds. The scheduler's
// free-GPU masks track at most 64 GPUs per node (maxNodeGPUs in
// internal/scheduler/cluster.go) and never offer the others, so a group
// with more is split into several virtual nodes ("chunks"). Keep the two
// in step.
const maxChunkGPUs = 64

// group is one virtual node: a chunk of at most maxChunkGPUs of the
// schedulable GPU nodes of one key. Chunk i holds the group's GPUs
// i×maxChunkGPUs on; all its chunks but the last are full.
type group struct {
	key   groupKey
	id    string
	chunk int // its index among its group's chunks
	// Raw label values of the group's nodes, sorted; "" stands for a node
	// without the label. Pods select any of them.
	models     []string
	capacities []string
	gpus       int
	gpuMemory  model.Bytes
	cpu        float64
	memory     model.Bytes
	// instanceTypes are the distinct instance-type labels, sorted.
	instanceTypes []string
	// pricePerHour is the sum of the nodes' prices; unpriced nodes add 0.
	pricePerHour float64
	nodes        int
	since        time.Time
}

// grouper turns nodes into groups. It is immutable once built.
type grouper struct {
	pool     string
	settings model.KubernetesPoolSettings // defaulted
	selector labels.Selector              // the pool's nodeSelector
	cat      *catalog.Catalog             // nil: models keep their labels, nodes unpriced
	prices   map[string][]model.Offer     // catalog offers by instance type
}

func newGrouper(pool string, s model.KubernetesPoolSettings, cat *catalog.Catalog) *grouper {
	g := &grouper{pool: pool, settings: s, selector: labels.SelectorFromSet(s.NodeSelector), cat: cat}
	if cat != nil && s.PricePerGPUHour == 0 {
		g.prices = map[string][]model.Offer{}
		for _, o := range cat.Offers() { // cheapest first
			g.prices[o.InstanceType] = append(g.prices[o.InstanceType], o)
		}
	}
	return g
}

// groups returns the virtual nodes: the groups of nodes, each split into
// chunks of at most maxChunkGPUs GPUs, ordered by id. A node counts when it
// matches the pool's node selector, is schedulable, ready, not being
// deleted, and has allocatable GPUs.
func (g *grouper) groups(nodes []*corev1.Node) []*group {
	byKey := map[groupKey]*group{}
	for _, n := range nodes {
		gpus := g.allocatableGPUs(n)
		if gpus == 0 || !usable(n) || !g.selector.Matches(labels.Set(n.Labels)) {
			continue
		}
		key, rawModel, rawCapacity := g.keyOf(n)
		grp := byKey[key]
		if grp == nil {
			grp = &group{key: key, id: groupID(g.pool, key), since: n.CreationTimestamp.Time, gpuMemory: g.gpuMemory(key.Model, n)}
			byKey[key] = grp
		}
		grp.models = addSorted(grp.models, rawModel)
		grp.capacities = addSorted(grp.capacities, rawCapacity)
		grp.instanceTypes = addSorted(grp.instanceTypes, n.Labels[LabelInstanceType])
		grp.gpus += gpus
		grp.cpu += n.Status.Allocatable.Cpu().AsApproximateFloat64()
		grp.memory += model.Bytes(n.Status.Allocatable.Memory().Value())
		grp.pricePerHour += float64(gpus) * g.pricePerGPUHour(n, key)
		grp.nodes++
		if t := n.CreationTimestamp.Time; t.Before(grp.since) {
			grp.since = t
		}
	}
	out := make([]*group, 0, len(byKey))
	for _, grp := range byKey {
		out = append(out, grp.chunks(g.pool)...)
	}
	slices.SortFunc(out, func(a, b *group) int { return strings.Compare(a.id, b.id) })
	return out
}

// usable reports whether kube-scheduler may place new pods on n.
func usable(n *corev1.Node) bool {
	if n.Spec.Unschedulable || n.DeletionTimestamp != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (g *grouper) allocatableGPUs(n *corev1.Node) int {
	q, ok := n.Status.Allocatable[corev1.ResourceName(g.settings.GPUResource)]
	if !ok {
		return 0
	}
	return max(int(q.Value()), 0)
}

// keyOf returns n's group key and its raw model and capacity-type labels.
func (g *grouper) keyOf(n *corev1.Node) (key groupKey, rawModel, rawCapacity string) {
	rawModel = n.Labels[g.settings.GPUModelLabel]
	rawCapacity = n.Labels[g.settings.CapacityTypeLabel]
	key = groupKey{
		Model:        g.modelName(rawModel, n),
		CapacityType: capacityType(rawCapacity),
		Region:       n.Labels[LabelRegion],
		Zone:         n.Labels[LabelZone],
	}
	return key, rawModel, rawCapacity
}

// modelName maps a GPU model label (NVIDIA-H100-80GB-HBM3) to the catalog's
// model name (H100). A model the catalog does not know keeps its label; a
// node without the label is "unknown".
func (g *grouper) modelName(raw string, n *corev1.Node) string {
	if raw == "" {
		return "unknown"
	}
	name := gpu.CatalogName(raw, labelGPUMemory(n))
	if g.cat == nil {
		return name
	}
	if canon, ok := g.cat.CanonicalGPU(name); ok {
		return canon
	}
	return raw
}

// gpuMemory is a GPU's memory: the catalog's for its model, else GPU
// feature discovery's label, else 0 (unknown).
func (g *grouper) gpuMemory(modelName string, n *corev1.Node) model.Bytes {
	if g.cat != nil {
		if a, ok := g.cat.Accelerator(modelName); ok && a.Memory > 0 {
			return a.Memory
		}
	}
	return labelGPUMemory(n)
}

func labelGPUMemory(n *corev1.Node) model.Bytes {
	mib, err := strconv.ParseInt(n.Labels[LabelGPUMemory], 10, 64)
	if err != nil || mib <= 0 {
		return 0
	}
	return model.Bytes(mib) * model.MiB
}

// capacityType reads a capacity-type label: Karpenter's spot and
// on-demand, EKS's SPOT and ON_DEMAND, GKE-style preemptible. A node
// without one, or with a value it does not know, is owned capacity.
func capacityType(raw string) model.CapacityType {
	switch strings.ToLower(strings.ReplaceAll(raw, "_", "-")) {
	case "spot", "preemptible", "true":
		return model.Spot
	case "on-demand", "ondemand", "normal", "regular":
		return model.OnDemand
	case "reserved", "capacity-block":
		return model.Reserved
	}
	return model.Owned
}

// pricePerGPUHour is one of n's GPUs' price: the pool's, else the catalog
// price of n's instance type (in n's region and capacity type where the
// catalog has one) over its GPUs, else 0.
func (g *grouper) pricePerGPUHour(n *corev1.Node, key groupKey) float64 {
	if g.settings.PricePerGPUHour > 0 {
		return g.settings.PricePerGPUHour
	}
	offers := g.prices[n.Labels[LabelInstanceType]]
	if len(offers) == 0 {
		return 0
	}
	want := model.OnDemand
	if key.CapacityType == model.Spot {
		want = model.Spot
	}
	var best *model.Offer
	for i := range offers {
		o := &offers[i]
		if o.CapacityType != want || o.GPUCount == 0 {
			continue
		}
		if o.Region == key.Region {
			best = o
			break
		}
		if best == nil {
			best = o // the cheapest anywhere, unless its own region has one
		}
	}
	if best == nil {
		return 0
	}
	return best.PricePerGPUHour()
}

// chunks splits a whole group into its virtual nodes: chunk i has the
// group's GPUs i×maxChunkGPUs on, at most maxChunkGPUs of them, and a share
// of its CPU, memory and price in proportion to its GPUs. Pods of any
// chunk go to any node of the group.
func (grp *group) chunks(pool string) []*group {
	n := (grp.gpus + maxChunkGPUs - 1) / maxChunkGPUs
	out := make([]*group, 0, n)
	for i := range n {
		c := *grp
		c.chunk = i
		c.id = chunkID(pool, grp.key, i)
		c.gpus = min(maxChunkGPUs, grp.gpus-i*maxChunkGPUs)
		if n > 1 {
			c.cpu = grp.cpu * float64(c.gpus) / float64(grp.gpus)
			c.memory = model.Bytes(float64(grp.memory) * float64(c.gpus) / float64(grp.gpus))
			c.pricePerHour = grp.pricePerHour / float64(grp.gpus) * float64(c.gpus)
		}
		out = append(out, &c)
	}
	return out
}

// groupID names the first virtual node of a group: the pool and a short
// hash of its key, deterministic and valid per model.ValidName.
func groupID(pool string, key groupKey) string { return chunkID(pool, key, 0) }

// chunkID names chunk i of a group: groupID's name, then -i for i > 0,
// the pool name shortened so the whole is at most 63 characters.
func chunkID(pool string, key groupKey, i int) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{key.Model, string(key.CapacityType), key.Region, key.Zone}, "\x00")))
	suffix := "-" + hex.EncodeToString(sum[:4])
	if i > 0 {
		suffix += "-" + strconv.Itoa(i)
	}
	prefix := pool
	if room := 63 - len(suffix); len(prefix) > room {
		prefix = strings.TrimRight(prefix[:room], "-")
	}
	return prefix + suffix
}

func addSorted(s []string, v string) []string {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

func (grp *group) region() string {
	if grp.key.Region == "" {
		return DefaultRegion
	}
	return grp.key.Region
}

func (grp *group) instanceType() string {
	types := slices.DeleteFunc(slices.Clone(grp.instanceTypes), func(s string) bool { return s == "" })
	switch {
	case len(grp.instanceTypes) == 1 && len(types) == 1:
		return types[0]
	case len(types) == 0:
		return instanceTypeNone
	default:
		return instanceTypeMixed
	}
}

// offer is what the virtual node sells: all its GPUs at its share of the
// sum of its group's nodes' prices.
func (grp *group) offer(pool string) model.Offer {
	return model.Offer{
		Provider: pool, Region: grp.region(), Zone: grp.key.Zone, InstanceType: grp.instanceType(),
		GPU: grp.key.Model, GPUCount: grp.gpus, GPUMemory: grp.gpuMemory, VCPUs: grp.cpu, Memory: grp.memory,
		CapacityType: grp.key.CapacityType, PricePerHour: grp.pricePerHour,
	}
}

// node is the group as the virtual node gpufleet schedules on.
func (grp *group) node(pool string) model.Node {
	n := model.Node{
		ID: grp.id, Name: grp.name(pool), Provider: pool, Pool: pool, State: model.NodeReady,
		CPU: grp.cpu, Memory: grp.memory, Labels: grp.labels(pool),
		Region: grp.region(), Zone: grp.key.Zone, InstanceType: grp.instanceType(), CapacityType: grp.key.CapacityType,
		PricePerHour: grp.pricePerHour, GPUSource: gpuSource, RegisteredAt: grp.since,
	}
	n.GPUs = make([]model.GPU, grp.gpus)
	for i := range n.GPUs {
		n.GPUs[i] = model.GPU{Index: i, UUID: fmt.Sprintf("k8s-%s-%d", grp.id, i), Model: grp.key.Model, Memory: grp.gpuMemory, NVLinkGroup: -1}
	}
	return n
}

// gpuSource is the GPU source a virtual node reports.
const gpuSource = "kubernetes"

func (grp *group) name(pool string) string {
	where := grp.key.Zone
	if where == "" {
		where = grp.region()
	}
	name := fmt.Sprintf("%s/%s/%s/%s", pool, grp.key.Model, grp.key.CapacityType, where)
	if grp.chunk > 0 {
		name += "/" + strconv.Itoa(grp.chunk)
	}
	return name
}

func (grp *group) labels(pool string) map[string]string {
	// Its own placement group: the scheduler keeps a multi-node gang in
	// one, so a gang never spans two virtual nodes and each attempt is
	// one Job.
	return map[string]string{LabelPool: pool, "gpufleet.dev/gpu-model": grp.key.Model, "gpufleet.dev/nodes": strconv.Itoa(grp.nodes),
		model.LabelPlacementGroup: grp.id}
}
