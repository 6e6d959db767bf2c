package kubernetes

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufleet/gpufleet/internal/model"
)

var everything = labels.Everything()

// maxGoneNodes bounds the memory of deleted nodes.
const maxGoneNodes = 4096

// The informers' handlers do no work themselves: they wake the runner's
// loops, which read the caches.

func (c *Cluster) runnerHooks() *runner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hooks
}

func (c *Cluster) nodesChanged() {
	if r := c.runnerHooks(); r != nil {
		r.nodesChanged()
	}
}

// nodeUpdated wakes the runner only when what grouping reads changed, not
// on every status heartbeat.
func (c *Cluster) nodeUpdated(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if ok1 && ok2 && usable(o) == usable(n) && labels.Equals(o.Labels, n.Labels) &&
		o.Status.Allocatable.Cpu().Equal(*n.Status.Allocatable.Cpu()) && o.Status.Allocatable.Memory().Equal(*n.Status.Allocatable.Memory()) &&
		quantityEqual(o, n, c.opts.Settings.GPUResource) {
		return
	}
	c.nodesChanged()
}

func quantityEqual(a, b *corev1.Node, res string) bool {
	qa, oka := a.Status.Allocatable[corev1.ResourceName(res)]
	qb, okb := b.Status.Allocatable[corev1.ResourceName(res)]
	return oka == okb && qa.Equal(qb)
}

func (c *Cluster) nodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		why := fmt.Sprintf("node %s deleted", n.Name)
		if capacityType(n.Labels[c.opts.Settings.CapacityTypeLabel]) == model.Spot {
			why += " (spot loss)"
		}
		c.mu.Lock()
		if len(c.goneNodes) >= maxGoneNodes {
			clear(c.goneNodes)
		}
		c.goneNodes[n.Name] = why
		c.mu.Unlock()
	}
	c.nodesChanged()
}

// nodeGone reports whether a pod's node no longer exists, and why.
func (c *Cluster) nodeGone(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	if _, err := c.nodes.Get(name); err == nil {
		return "", false
	}
	c.mu.Lock()
	why, ok := c.goneNodes[name]
	c.mu.Unlock()
	if !ok {
		why = fmt.Sprintf("node %s is gone", name)
	}
	return why, true
}

// objectHandler tells the virtual node whose Job or pod changed which of
// its replicas to look at again.
func (c *Cluster) objectHandler() cache.ResourceEventHandler {
	changed := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		r := c.runnerHooks()
		if r == nil {
			return
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			if id, ok := replicaOf(o); ok && c.ours(o) {
				r.touch(o.Labels[LabelNode], id, "")
			}
		case *batchv1.Job:
			if c.ours(o) {
				r.touch(o.Labels[LabelNode], "", o.Name)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, cur any) { changed(cur) }, DeleteFunc: changed}
}

// jobDeleted has the runner check whether the Job's attempt still needs its
// Service (a gang's, or a service replica's).
func (c *Cluster) jobDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	j, ok := obj.(*batchv1.Job)
	if !ok || !c.ours(j) {
		return
	}
	indexed := j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
	if !indexed && j.Annotations[AnnotationEndpoint] == "" {
		return
	}
	if r := c.runnerHooks(); r != nil && j.Annotations[AnnotationAttemptID] != "" {
		r.queue.Add(keyService + serviceName(j.Annotations[AnnotationAttemptID]))
	}
}
