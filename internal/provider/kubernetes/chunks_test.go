package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

// h100s returns n H100 nodes of gpus GPUs each, all of one group.
func h100s(n, gpus int) []runtime.Object {
	out := make([]runtime.Object, n)
	for i := range out {
		out[i] = h100(fmt.Sprintf("n%02d", i)).gpus(gpus).obj()
	}
	return out
}

func TestLargeGroupSplitsIntoChunks(t *testing.T) {
	c, _ := startCluster(t, model.KubernetesPoolSettings{PricePerGPUHour: 2}, h100s(20, 8)...)
	ms, err := c.Machines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("machines = %d, want 3", len(ms))
	}
	key := groupKey{Model: "H100", CapacityType: model.OnDemand, Region: "us-east-1", Zone: "us-east-1a"}
	sizes := map[string]int{}
	placement, uuids := map[string]bool{}, map[string]bool{}
	var cpu float64
	var mem model.Bytes
	for _, m := range ms {
		sizes[m.ID] = len(m.GPUs)
		if !model.ValidName(m.ID) {
			t.Errorf("node id %q is not a valid name", m.ID)
		}
		pg := m.Labels[model.LabelPlacementGroup]
		if pg != m.ID || placement[pg] {
			t.Errorf("node %s placement group %q, want its own id", m.ID, pg)
		}
		placement[pg] = true
		if m.PricePerHour != 2*float64(len(m.GPUs)) {
			t.Errorf("node %s costs %v, want %v", m.ID, m.PricePerHour, 2*len(m.GPUs))
		}
		for j, g := range m.GPUs {
			if g.Index != j || uuids[g.UUID] {
				t.Errorf("node %s GPU %d = %+v (index or a repeated UUID)", m.ID, j, g)
			}
			uuids[g.UUID] = true
		}
		cpu += m.CPU
		mem += m.Memory
	}
	want := map[string]int{groupID("k8s", key): 64, chunkID("k8s", key, 1): 64, chunkID("k8s", key, 2): 32}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("virtual nodes' GPUs = %v, want %v", sizes, want)
	}
	var wantCPU float64
	var wantMem model.Bytes
	nodes, _ := c.nodes.List(everything)
	for _, n := range nodes {
		wantCPU += n.Status.Allocatable.Cpu().AsApproximateFloat64()
		wantMem += model.Bytes(n.Status.Allocatable.Memory().Value())
	}
	if cpu < wantCPU-1e-6 || cpu > wantCPU+1e-6 || mem < wantMem-3 || mem > wantMem {
		t.Errorf("chunks' CPUs and memory sum to %v and %v, want %v and %v", cpu, mem, wantCPU, wantMem)
	}

	offers, err := c.Offers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for _, o := range offers {
		counts[o.GPUCount]++
	}
	if len(offers) != 2 || counts[64] != 1 || counts[32] != 1 {
		t.Errorf("offers = %+v, want one of 64 GPUs and one of 32", offers)
	}
	list, _ := c.List(context.Background())
	if len(list) != 3 {
		t.Errorf("List = %d instances, want 3", len(list))
	}
	providertest.Run(t, c, providertest.Options{})
}

func TestChunkIDsOfALongPoolName(t *testing.T) {
	pool := strings.Repeat("p", 63)
	key := groupKey{Model: "H100", CapacityType: model.Spot, Region: "r", Zone: "z"}
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 9, 10, 124, 1000} {
		id := chunkID(pool, key, i)
		if !model.ValidName(id) || len(id) > 63 || seen[id] {
			t.Errorf("chunk %d id %q: want a valid, distinct name", i, id)
		}
		seen[id] = true
	}
	if chunkID(pool, key, 0) != groupID(pool, key) || chunkID("k8s", key, 3) != groupID("k8s", key)+"-3" {
		t.Errorf("chunk ids %q %q: chunk 0 keeps the group's id", chunkID(pool, key, 0), chunkID("k8s", key, 3))
	}
}

func TestShrinkingGroupRetiresItsLastChunk(t *testing.T) {
	// 20 nodes of 4 GPUs: chunks of 64 and 16. Without 5 of them, 60 GPUs:
	// the first chunk shrinks to 60, the second goes.
	h := newHarness(t, model.KubernetesPoolSettings{PricePerGPUHour: 1}, h100s(20, 4)...)
	key := groupKey{Model: "H100", CapacityType: model.OnDemand, Region: "us-east-1", Zone: "us-east-1a"}
	first, second := groupID("k8s", key), chunkID("k8s", key, 1)
	h.run()
	lastGPUs := func(id string) int {
		n := -1
		for _, r := range h.cp.registrations() {
			if r.NodeID == id {
				n = len(r.GPUs)
			}
		}
		return n
	}
	eventually(t, "both chunks registered", func() bool { return lastGPUs(first) == 64 && lastGPUs(second) == 16 })

	for i := 15; i < 20; i++ {
		if err := h.cs.CoreV1().Nodes().Delete(bg, fmt.Sprintf("n%02d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the first chunk resized, the second registered without GPUs", func() bool {
		return lastGPUs(first) == 60 && lastGPUs(second) == 0
	})
	eventually(t, "the second chunk retired", func() bool {
		r := h.c.runnerHooks()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.vnodes[second] == nil && r.vnodes[first] != nil
	})
	ms, _ := h.c.Machines(bg)
	if len(ms) != 1 || ms[0].ID != first || len(ms[0].GPUs) != 60 {
		t.Errorf("machines = %+v, want %s with 60 GPUs", ms, first)
	}

	// Growing back adds the chunk again.
	for i := 15; i < 20; i++ {
		if _, err := h.cs.CoreV1().Nodes().Create(bg, h100(fmt.Sprintf("n%02d", i)).gpus(4).obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the second chunk back", func() bool { return lastGPUs(first) == 64 && lastGPUs(second) == 16 })
}
