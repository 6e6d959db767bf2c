package kubetest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
)

// Well-known labels and resources of GPU nodes.
const (
	ResourceGPU       corev1.ResourceName = "nvidia.com/gpu"
	LabelGPUProduct                       = "nvidia.com/gpu.product"
	LabelCapacityType                     = "karpenter.sh/capacity-type"
	LabelRegion                           = "topology.kubernetes.io/region"
	LabelZone                             = "topology.kubernetes.io/zone"
	LabelInstanceType                     = "node.kubernetes.io/instance-type"
	// LabelBatch is set on every node of one AddGPUNodes call, with a
	// value unique within the control plane.
	LabelBatch = "kubetest.gpufleet.dev/batch"
)

// NodeSpec describes fake GPU nodes. The zero value means an on-demand
// p5.48xlarge in us-east-1a with 8 H100s.
type NodeSpec struct {
	// NamePrefix starts each node's name; a number unique within the
	// control plane follows. Default "kwok-gpu-".
	NamePrefix string
	// GPUs is the node's nvidia.com/gpu capacity and allocatable. Default 8.
	GPUs int
	// GPUProduct is the nvidia.com/gpu.product label. Default
	// "NVIDIA-H100-80GB-HBM3".
	GPUProduct string
	// CapacityType is the karpenter.sh/capacity-type label ("on-demand",
	// "spot", "reserved"). Default "on-demand".
	CapacityType string
	// Region and Zone are the topology.kubernetes.io labels. Default
	// "us-east-1" and Region+"a".
	Region, Zone string
	// InstanceType is the node.kubernetes.io/instance-type label. Default
	// "p5.48xlarge".
	InstanceType string
	// CPU and Memory are quantities ("192", "2Ti"). Default "192" and
	// "2048Gi".
	CPU, Memory string
	// Pods is the pod capacity; at least 110.
	Pods int
	// Labels and Annotations are added to the defaults; Labels win over
	// the labels above.
	Labels, Annotations map[string]string
	// Taints are the node's taints (none by default).
	Taints []corev1.Taint
}

func (s NodeSpec) withDefaults() NodeSpec {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.NamePrefix, "kwok-gpu-")
	def(&s.GPUProduct, "NVIDIA-H100-80GB-HBM3")
	def(&s.CapacityType, "on-demand")
	def(&s.Region, "us-east-1")
	def(&s.Zone, s.Region+"a")
	def(&s.InstanceType, "p5.48xlarge")
	def(&s.CPU, "192")
	def(&s.Memory, "2048Gi")
	if s.GPUs == 0 {
		s.GPUs = 8
	}
	s.Pods = max(s.Pods, 110)
	return s
}

// node builds the Node object, status included: like a kubelet, whoever
// registers a node reports its capacity.
func (s NodeSpec) node(name, batch string) (*corev1.Node, error) {
	cpu, err := resource.ParseQuantity(s.CPU)
	if err != nil {
		return nil, fmt.Errorf("node spec cpu %q: %w", s.CPU, err)
	}
	mem, err := resource.ParseQuantity(s.Memory)
	if err != nil {
		return nil, fmt.Errorf("node spec memory %q: %w", s.Memory, err)
	}
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
		LabelGPUProduct:          s.GPUProduct,
		LabelCapacityType:        s.CapacityType,
		LabelRegion:              s.Region,
		LabelZone:                s.Zone,
		LabelInstanceType:        s.InstanceType,
		"nvidia.com/gpu.count":   strconv.Itoa(s.GPUs),
	}
	maps.Copy(labels, s.Labels)
	labels[LabelBatch] = batch
	annotations := map[string]string{NodeAnnotation: "fake"}
	maps.Copy(annotations, s.Annotations)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    cpu,
		corev1.ResourceMemory: mem,
		corev1.ResourcePods:   *resource.NewQuantity(int64(s.Pods), resource.DecimalSI),
		ResourceGPU:           *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: s.Taints},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Phase:       corev1.NodePending,
		},
	}, nil
}

// AddGPUNodes creates n KWOK nodes from spec, 64 at a time, and waits until
// all are Ready and schedulable (WaitNodesReady). It returns their names.
// 1,000 nodes took 19 s on 2 cores shared with other builds (load 10).
// Without a deadline on ctx it waits at most 2 minutes plus 100 ms a node.
func (c *Cluster) AddGPUNodes(ctx context.Context, n int, spec NodeSpec) []string {
	c.tb.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute+time.Duration(n)*100*time.Millisecond)
		defer cancel()
	}
	spec = spec.withDefaults()
	batch := strconv.FormatInt(c.cp.batchSeq.Add(1), 10)
	nodes := make([]*corev1.Node, n)
	names := make([]string, n)
	for i := range nodes {
		names[i] = spec.NamePrefix + strconv.FormatInt(c.cp.nodeSeq.Add(1), 10)
		node, err := spec.node(names[i], batch)
		if err != nil {
			c.tb.Fatalf("adding GPU nodes: %v", err)
		}
		nodes[i] = node
	}
	if err := c.createNodes(ctx, nodes); err != nil {
		c.tb.Fatalf("adding %d GPU nodes: %v", n, err)
	}
	if err := c.WaitNodesReady(ctx, LabelBatch+"="+batch, n); err != nil {
		c.tb.Fatalf("adding %d GPU nodes: %v", n, err)
	}
	return names
}

func (c *Cluster) createNodes(ctx context.Context, nodes []*corev1.Node) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan *corev1.Node)
	var wg sync.WaitGroup
	for range min(64, len(nodes)) {
		wg.Go(func() {
			for node := range work {
				if _, err := c.cp.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					cancel(fmt.Errorf("creating node %s: %w", node.Name, err))
				}
			}
		})
	}
feed:
	for _, node := range nodes {
		select {
		case work <- node:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// WaitNodesReady waits, with one list and a watch, until at least n nodes
// matching the label selector are Ready and carry no not-ready or
// unreachable taint (NodeReady). It returns ctx's error if that comes
// first.
func (c *Cluster) WaitNodesReady(ctx context.Context, selector string, n int) error {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return c.cp.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return c.cp.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	ready := map[string]bool{}
	count := func() int {
		k := 0
		for _, r := range ready {
			if r {
				k++
			}
		}
		return k
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(ev watch.Event) (bool, error) {
		node, ok := ev.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			ready[node.Name] = NodeReady(node)
		case watch.Deleted:
			delete(ready, node.Name)
		}
		return count() >= n, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d ready nodes (%s), %d ready: %w", n, selector, count(), err)
	}
	return nil
}

// NodeReady reports whether node is Ready and schedulable as far as its
// health goes: Ready is True and no not-ready or unreachable taint remains.
func NodeReady(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DeleteNode deletes the Node object, as a cloud does when it reclaims a
// spot VM, and returns at once. The node's pods are not touched: PodGC
// fails and deletes them 40 to 80 s later (see the package documentation),
// or GCOrphanedPods does so now.
func (c *Cluster) DeleteNode(ctx context.Context, name string) {
	c.tb.Helper()
	if err := c.cp.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		c.tb.Fatalf("deleting node %s: %v", name, err)
	}
}

// GCOrphanedPods does at once what kube-controller-manager's PodGC does to
// the pods of a deleted node 40 to 80 s after the deletion: each pod not yet
// Succeeded or Failed gets phase Failed and condition DisruptionTarget
// (reason DeletionByPodGC), then every pod on the node is deleted with grace
// period 0. It fails the test if the node still exists, and returns how
// many pods it deleted.
func (c *Cluster) GCOrphanedPods(ctx context.Context, node string) int {
	c.tb.Helper()
	n, err := c.gcOrphanedPods(ctx, node)
	if err != nil {
		c.tb.Fatalf("collecting the pods of node %s: %v", node, err)
	}
	return n
}

func (c *Cluster) gcOrphanedPods(ctx context.Context, node string) (int, error) {
	cs := c.cp.client
	if _, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		return 0, fmt.Errorf("node %s still exists", node)
	} else if !apierrors.IsNotFound(err) {
		return 0, err
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, pod := range pods.Items {
		pods := cs.CoreV1().Pods(pod.Namespace)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				return err
			}
			p.Status.Phase = corev1.PodFailed
			setCondition(&p.Status, corev1.PodCondition{
				Type:               corev1.DisruptionTarget,
				Status:             corev1.ConditionTrue,
				Reason:             "DeletionByPodGC",
				Message:            "PodGC: node no longer exists",
				LastTransitionTime: metav1.Now(),
			})
			_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("failing pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		err = pods.Delete(ctx, pod.Name, *metav1.NewDeleteOptions(0))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		deleted++
	}
	return deleted, nil
}

func setCondition(status *corev1.PodStatus, cond corev1.PodCondition) {
	for i := range status.Conditions {
		if status.Conditions[i].Type == cond.Type {
			status.Conditions[i] = cond
			return
		}
	}
	status.Conditions = append(status.Conditions, cond)
}
