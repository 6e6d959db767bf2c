package kubernetes

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
)

func loadCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestConformance(t *testing.T) {
	for name, objs := range map[string][]runtime.Object{
		"one group": {h100("a").obj(), h100("b").obj()},
		"mixed cluster": {
			h100("a").obj(),
			h100("spot-1").capacity("spot").obj(),
			node("l4-1").gpu("NVIDIA-L4").capacity("ON_DEMAND").zone("eu-west-1", "eu-west-1b").gpus(1).obj(),
			node("bare").gpu("NVIDIA-A100-SXM4-80GB").gpus(4).obj(), // no region, zone or capacity type
			node("cpu").gpus(0).obj(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := startCluster(t, model.KubernetesPoolSettings{PricePerGPUHour: 2.5}, objs...)
			providertest.Run(t, c, providertest.Options{}) // Fixed from Machines
		})
	}
}

func TestGroupsAndPrices(t *testing.T) {
	cat := loadCatalog(t)
	var p5 float64 // the catalog's on-demand p5.48xlarge in us-east-1, per GPU-hour
	for _, o := range cat.Offers() {
		if o.InstanceType == "p5.48xlarge" && o.Region == "us-east-1" && o.CapacityType == model.OnDemand {
			p5 = o.PricePerGPUHour()
			break
		}
	}
	if p5 == 0 {
		t.Fatal("the catalog has no on-demand p5.48xlarge in us-east-1")
	}
	h100Mem := func() model.Bytes { a, _ := cat.Accelerator("H100"); return a.Memory }()
	type offer struct {
		GPU          string
		GPUs         int
		GPUMemory    model.Bytes
		CapacityType model.CapacityType
		Region, Zone string
		Instance     string
		Price        float64
	}
	for name, tc := range map[string]struct {
		settings model.KubernetesPoolSettings
		nodes    []*corev1.Node
		want     []offer
	}{
		"catalog prices by instance type": {
			nodes: []*corev1.Node{h100("a").obj(), h100("b").obj()},
			want:  []offer{{"H100", 16, h100Mem, model.OnDemand, "us-east-1", "us-east-1a", "p5.48xlarge", 16 * p5}},
		},
		"pool price wins": {
			settings: model.KubernetesPoolSettings{PricePerGPUHour: 3},
			nodes:    []*corev1.Node{h100("a").obj()},
			want:     []offer{{"H100", 8, h100Mem, model.OnDemand, "us-east-1", "us-east-1a", "p5.48xlarge", 24}},
		},
		"unschedulable, not ready, deleting and GPU-less nodes do not count": {
			nodes: []*corev1.Node{h100("a").obj(), h100("b").cordoned().obj(), h100("c").notReady().obj(), h100("d").deleting().obj(),
				h100("e").gpus(0).obj(), node("cpu").zone("us-east-1", "us-east-1a").gpus(0).obj()},
			want: []offer{{"H100", 8, h100Mem, model.OnDemand, "us-east-1", "us-east-1a", "p5.48xlarge", 8 * p5}},
		},
		"grouped by capacity type and zone; EKS spellings": {
			settings: model.KubernetesPoolSettings{PricePerGPUHour: 1},
			nodes: []*corev1.Node{h100("a").capacity("SPOT").obj(), h100("b").capacity("spot").obj(), h100("c").capacity("ON_DEMAND").obj(),
				h100("d").zone("us-east-1", "us-east-1b").obj()},
			want: []offer{
				{"H100", 16, h100Mem, model.Spot, "us-east-1", "us-east-1a", "p5.48xlarge", 16},
				{"H100", 8, h100Mem, model.OnDemand, "us-east-1", "us-east-1a", "p5.48xlarge", 8},
				{"H100", 8, h100Mem, model.OnDemand, "us-east-1", "us-east-1b", "p5.48xlarge", 8},
			},
		},
		"unknown model keeps its label; GFD memory; unpriced; no topology": {
			nodes: []*corev1.Node{node("x").gpu("NVIDIA-Foo-9000").label(LabelGPUMemory, "49152").gpus(2).obj()},
			want:  []offer{{"NVIDIA-Foo-9000", 2, 48 * model.GiB, model.Owned, DefaultRegion, "", instanceTypeNone, 0}},
		},
		"A100 80GB label maps to the catalog's A100-80GB": {
			settings: model.KubernetesPoolSettings{PricePerGPUHour: 1},
			nodes:    []*corev1.Node{node("x").gpu("NVIDIA-A100-SXM4-80GB").gpus(4).obj()},
			want: []offer{{"A100-80GB", 4, func() model.Bytes { a, _ := cat.Accelerator("A100-80GB"); return a.Memory }(),
				model.Owned, DefaultRegion, "", instanceTypeNone, 4}},
		},
		"pool node selector and custom labels": {
			settings: model.KubernetesPoolSettings{PricePerGPUHour: 1, NodeSelector: map[string]string{"team": "ml"},
				GPUModelLabel: "acme.com/gpu", CapacityTypeLabel: "acme.com/lifecycle", GPUResource: "acme.com/gpu"},
			nodes: []*corev1.Node{
				func() *corev1.Node {
					n := node("a").label("team", "ml").label("acme.com/gpu", "L4").label("acme.com/lifecycle", "spot").obj()
					n.Status.Allocatable["acme.com/gpu"] = n.Status.Allocatable[DefaultGPUResource]
					return n
				}(),
				h100("b").obj(), // not the team's, and no acme.com/gpu
			},
			want: []offer{{"L4", 8, func() model.Bytes { a, _ := cat.Accelerator("L4"); return a.Memory }(), model.Spot, DefaultRegion, "", instanceTypeNone, 8}},
		},
		"mixed instance types": {
			settings: model.KubernetesPoolSettings{PricePerGPUHour: 1},
			nodes:    []*corev1.Node{h100("a").obj(), h100("b").label(LabelInstanceType, "a3-highgpu-8g").obj()},
			want:     []offer{{"H100", 16, h100Mem, model.OnDemand, "us-east-1", "us-east-1a", instanceTypeMixed, 16}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := newGrouper("k8s", withDefaults(tc.settings), cat)
			var got []offer
			for _, grp := range g.groups(tc.nodes) {
				o := grp.offer("k8s")
				got = append(got, offer{o.GPU, o.GPUCount, o.GPUMemory, o.CapacityType, o.Region, o.Zone, o.InstanceType, o.PricePerHour})
			}
			less := func(a, b offer) bool {
				return a.CapacityType+model.CapacityType(a.Zone) < b.CapacityType+model.CapacityType(b.Zone)
			}
			if diff := cmp.Diff(tc.want, got, cmpSort(less), approx()); diff != "" {
				t.Errorf("offers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMachinesAreValidVirtualNodes(t *testing.T) {
	c, _ := startCluster(t, model.KubernetesPoolSettings{PricePerGPUHour: 2}, h100("a").obj(), h100("b").capacity("spot").gpus(4).obj())
	ms, err := c.Machines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("machines = %d, want 2", len(ms))
	}
	again, _ := c.Machines(context.Background())
	for i, m := range ms {
		if !model.ValidName(m.ID) || m.ID != again[i].ID {
			t.Errorf("node id %q: want a valid, stable name", m.ID)
		}
		if m.PricePerHour != 2*float64(len(m.GPUs)) || m.Pool != "k8s" || m.Labels[LabelPool] != "k8s" {
			t.Errorf("node %s: price %v, pool %q, labels %v", m.ID, m.PricePerHour, m.Pool, m.Labels)
		}
		for j, g := range m.GPUs {
			if g.Index != j || g.UUID != "k8s-"+m.ID+"-"+itoa(j) || g.Model != "H100" {
				t.Errorf("node %s GPU %d = %+v", m.ID, j, g)
			}
		}
	}
	if _, err := c.Launch(context.Background(), provider.LaunchRequest{}); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Errorf("Launch: %v, want ErrFixedCapacity", err)
	}
}

func TestObjectsAndDeleteObjects(t *testing.T) {
	mine := func(kind string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: kind + "-1", Namespace: DefaultNamespace, Labels: map[string]string{LabelManagedBy: "k8s"}}
	}
	other := metav1.ObjectMeta{Name: "theirs", Namespace: DefaultNamespace, Labels: map[string]string{LabelManagedBy: "other"}}
	c, cs := startCluster(t, model.KubernetesPoolSettings{},
		&batchJob{ObjectMeta: mine("job")}, &corev1.Pod{ObjectMeta: mine("pod")}, &corev1.Service{ObjectMeta: mine("svc")},
		&batchJob{ObjectMeta: other}, &corev1.Service{ObjectMeta: other})
	ctx := context.Background()
	objs, err := c.Objects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Object{
		{Kind: "Job", Namespace: DefaultNamespace, Name: "job-1", Labels: map[string]string{LabelManagedBy: "k8s"}},
		{Kind: "Pod", Namespace: DefaultNamespace, Name: "pod-1", Labels: map[string]string{LabelManagedBy: "k8s"}},
		{Kind: "Service", Namespace: DefaultNamespace, Name: "svc-1", Labels: map[string]string{LabelManagedBy: "k8s"}},
	}
	if diff := cmp.Diff(want, objs); diff != "" {
		t.Errorf("Objects (-want +got):\n%s", diff)
	}
	if err := c.DeleteObjects(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.BatchV1().Jobs(DefaultNamespace).Get(ctx, "job-1", metav1.GetOptions{}); err == nil {
		t.Errorf("job-1 survived DeleteObjects")
	}
	if _, err := cs.BatchV1().Jobs(DefaultNamespace).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("another pool's Job was deleted: %v", err)
	}
}
