package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// Run is the agent of the pool's virtual nodes until ctx ends: for each
// group of nodes it registers a virtual node with cp, long-polls its
// desired set, and runs each attempt placed on it as a Job. It adopts the
// Jobs a previous run left, and never creates a second Job for an attempt.
// Jobs keep running when Run returns; a later Run adopts them. Start must
// have returned first; Run may run once at a time. It returns nil when ctx
// ends.
func (c *Cluster) Run(ctx context.Context, cp agentapi.ControlPlane) error {
	if err := c.ready(ctx); err != nil {
		return err
	}
	r := &runner{
		c: c, cp: cp, log: c.log.With("component", "kubernetes-runner"),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, c.opts.MaxRetryBackoff),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gpufleet-" + c.opts.Pool}),
		logSlots:      make(chan struct{}, c.opts.LogStreams),
		groupsChanged: make(chan struct{}, 1),
		vnodes:        map[string]*vnode{},
		groups:        map[string]*group{},
		wants:         map[string]*want{},
	}
	c.mu.Lock()
	if c.hooks != nil {
		c.mu.Unlock()
		return fmt.Errorf("running kubernetes pool %s: already running", c.opts.Pool)
	}
	c.hooks = r
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.hooks = nil
		c.mu.Unlock()
	}()
	r.run(ctx)
	return nil
}

// runner carries out the desired sets of a pool's virtual nodes.
type runner struct {
	c   *Cluster
	cp  agentapi.ControlPlane
	log *slog.Logger

	// queue holds the keys of wants ("job/NAME", "service/NAME") for the
	// workers; it merges repeats and backs off failures per key.
	queue    workqueue.TypedRateLimitingInterface[string]
	logSlots chan struct{}
	// groupsChanged is rung (never blocks) when nodes change.
	groupsChanged chan struct{}
	loops         sync.WaitGroup

	mu     sync.Mutex
	vnodes map[string]*vnode // running loops by node id; guarded by mu
	groups map[string]*group // the current groups by id; guarded by mu
	wants  map[string]*want  // by queue key; guarded by mu
}

// want is what the runner wants of one Job or Service. A vnode replaces a
// want rather than change it; the workers write its results.
type want struct {
	node    string
	attempt string
	job     *batchv1.Job    // to create, unless delete; nil: only an adopted Job's secret
	svc     *corev1.Service // a gang's or service replica's Service, created before its Job
	// policy admits what the attempt's pods must be reached by (gate.go);
	// created after svc, before the Job, and deleted before svc.
	policy *networkingv1.NetworkPolicy
	// secret holds the Job's secret environment; created with the Job
	// and deleted when the attempt's end is recorded.
	secret *corev1.Secret
	delete bool
	// keepJob, with delete: only the Secret goes; the finished Job stays
	// until the cluster's TTL-after-finished controller deletes it.
	keepJob bool
	grace   *int64
	// Results, guarded by runner.mu.
	done   bool   // created (or found) or deleted
	failed string // the API refused the create for good
}

// Queue key prefixes, and the key of the pool's NetworkPolicies.
const (
	keyJob      = "job/"
	keyService  = "service/"
	keyPolicies = "policies"
)

// run supervises: it starts a loop per virtual node, and workers for the
// queue, until ctx ends.
func (r *runner) run(ctx context.Context) {
	var workers sync.WaitGroup
	for range r.c.opts.Workers {
		workers.Go(func() { r.work(ctx) })
	}
	// Services whose Jobs are all gone (deleted while no runner ran).
	if svcs, err := r.c.services.Services(r.c.opts.Settings.Namespace).List(everything); err == nil {
		for _, s := range svcs {
			if r.c.ours(s) {
				r.queue.Add(keyService + s.Name)
			}
		}
	}
	r.deleteOrphanSecrets(ctx)
	r.queue.Add(keyPolicies)
	for {
		r.reconcileNodes(ctx)
		select {
		case <-ctx.Done():
			r.loops.Wait()
			r.queue.ShutDown()
			workers.Wait()
			return
		case <-r.groupsChanged:
		}
	}
}

// reconcileNodes starts a loop for each virtual node that has GPUs or
// Jobs and none yet, and wakes the others to check their registration.
func (r *runner) reconcileNodes(ctx context.Context) {
	groups := r.c.groups()
	ids := map[string]bool{}
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.groups)
	for _, g := range groups {
		r.groups[g.id] = g
		ids[g.id] = true
	}
	for _, id := range r.c.jobs.ListIndexFuncValues(indexNode) {
		ids[id] = true
	}
	for id := range ids {
		if v, ok := r.vnodes[id]; ok {
			ring(v.changed) // its registration may change
			continue
		}
		if ctx.Err() != nil {
			return
		}
		v := newVnode(r, id)
		r.vnodes[id] = v
		r.loops.Go(func() { v.run(ctx) })
	}
}

func (r *runner) nodesChanged() {
	ring(r.groupsChanged)
	// Pods on a deleted node are lost: every virtual node looks at all
	// its replicas again.
	r.mu.Lock()
	for _, v := range r.vnodes {
		v.touchAll()
	}
	r.mu.Unlock()
}

// touch tells virtual node id's loop, if one runs, that replica (or every
// replica of Job job) may have changed.
func (r *runner) touch(id, replica, job string) {
	r.mu.Lock()
	v := r.vnodes[id]
	r.mu.Unlock()
	if v != nil {
		v.touch(replica, job)
	}
}

// group returns the current group of virtual node id, or nil.
func (r *runner) group(id string) *group {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups[id]
}

// retire removes v when it has nothing left to do and its group is gone;
// false means it must go on.
func (r *runner) retire(v *vnode) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups[v.id] != nil || len(r.c.jobsOf(v.id)) > 0 {
		return false
	}
	delete(r.vnodes, v.id)
	return true
}

// setWant records w under key and queues it.
func (r *runner) setWant(key string, w *want) {
	r.mu.Lock()
	r.wants[key] = w
	r.mu.Unlock()
	r.queue.Add(key)
}

// dropWant forgets key's want if it is still w.
func (r *runner) dropWant(key string, w *want) {
	r.mu.Lock()
	if r.wants[key] == w {
		delete(r.wants, key)
	}
	r.mu.Unlock()
}

// result returns what the workers made of w.
func (r *runner) result(w *want) (done bool, failed string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.done, w.failed
}

// work carries out queued wants until the queue shuts down.
func (r *runner) work(ctx context.Context) {
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		err := r.reconcile(ctx, key)
		switch {
		case err == nil:
			r.queue.Forget(key)
		case ctx.Err() != nil:
		default:
			r.log.Warn("kubernetes request failed; retrying", "key", key, "err", err)
			r.queue.AddRateLimited(key)
		}
		r.queue.Done(key)
	}
}

// reconcile makes one Job or Service what its want says. An error means
// try again later.
func (r *runner) reconcile(ctx context.Context, key string) error {
	r.mu.Lock()
	w := r.wants[key]
	r.mu.Unlock()
	switch {
	case key == keyPolicies:
		return r.reconcilePolicies(ctx)
	case strings.HasPrefix(key, keyService):
		return r.reconcileService(ctx, strings.TrimPrefix(key, keyService))
	case w == nil:
		return nil
	}
	name := strings.TrimPrefix(key, keyJob)
	ns := r.c.opts.Settings.Namespace
	finish := func(failed string) {
		r.mu.Lock()
		w.done, w.failed = failed == "", failed
		r.mu.Unlock()
		r.touch(w.node, "", name)
	}
	jobs := r.c.opts.Client.BatchV1().Jobs(ns)
	if w.delete {
		if !w.keepJob {
			bg := metav1.DeletePropagationBackground
			err := jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg, GracePeriodSeconds: w.grace})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting job %s: %w", name, err)
			}
		}
		// The Secret names no owner: its values leave the cluster now,
		// as the attempt ends.
		err := r.c.opts.Client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting secret %s: %w", name, err)
		}
		finish("")
		if w.attempt != "" {
			r.queue.Add(keyService + serviceName(w.attempt))
		}
		return nil
	}
	if _, err := r.c.jobList.Jobs(ns).Get(name); err == nil {
		// Adopted: a create whose answer was lost, or whose Secret is
		// still to be made.
		if err := r.createSecret(ctx, w); err != nil {
			if permanent(err) {
				finish(err.Error())
				return nil
			}
			return err
		}
		finish("")
		return nil
	}
	if w.job == nil {
		finish("") // an adopted Job's Secret, and the Job is gone
		return nil
	}
	// The Secret goes with the Job, not after it: it names no owner, so
	// neither waits for the other, and a pod never starts before its
	// Secret exists (the kubelet would retry it only later).
	var secretErr error
	var secretMade sync.WaitGroup
	secretMade.Go(func() { secretErr = r.createSecret(ctx, w) })
	defer secretMade.Wait()
	if w.svc != nil {
		_, err := r.c.opts.Client.CoreV1().Services(ns).Create(ctx, w.svc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			if permanent(err) {
				finish(fmt.Sprintf("creating Service %s: %v", w.svc.Name, err))
				return nil
			}
			return fmt.Errorf("creating service %s: %w", w.svc.Name, err)
		}
	}
	if w.policy != nil {
		_, err := r.c.opts.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, w.policy, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			if permanent(err) {
				finish(fmt.Sprintf("creating NetworkPolicy %s (the pool's networkPolicy: false makes none): %v", w.policy.Name, err))
				return nil
			}
			return fmt.Errorf("creating network policy %s: %w", w.policy.Name, err)
		}
	}
	_, err := jobs.Create(ctx, w.job, metav1.CreateOptions{})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
	case permanent(err):
		finish(fmt.Sprintf("creating Job %s: %v", name, err))
		return nil
	default:
		return fmt.Errorf("creating job %s: %w", name, err)
	}
	secretMade.Wait()
	if secretErr != nil {
		if permanent(secretErr) {
			finish(secretErr.Error())
			return nil
		}
		return secretErr
	}
	finish("")
	return nil
}

// createSecret creates w's Secret, if it has one; one that exists already
// is no error. It names no owner: the runner deletes it once the attempt's
// end is recorded, and a starting runner deletes those whose Job is gone.
func (r *runner) createSecret(ctx context.Context, w *want) error {
	if w.secret == nil {
		return nil
	}
	_, err := r.c.opts.Client.CoreV1().Secrets(w.secret.Namespace).Create(ctx, w.secret, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Secret %s: %w", w.secret.Name, err)
	}
	return nil
}

// deleteOrphanSecrets deletes the pool's Secrets whose Job is gone: the
// garbage collector takes them in time, or never when their Job went
// before they were made.
func (r *runner) deleteOrphanSecrets(ctx context.Context) {
	ns := r.c.opts.Settings.Namespace
	secrets, err := r.c.opts.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + r.c.opts.Pool})
	if err != nil {
		r.log.Warn("listing the pool's Secrets", "err", err)
		return
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if !r.c.ours(s) || r.c.job(s.Name) != nil {
			continue
		}
		if err := r.c.opts.Client.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.log.Warn("deleting a Secret whose Job is gone", "secret", s.Name, "err", err)
		}
	}
}

// permanent reports whether a create will fail again however often it is
// tried: an invalid object, a missing namespace, a forbidden request that
// is not a quota.
func permanent(err error) bool {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsNotFound(err):
		return true
	case apierrors.IsForbidden(err):
		return !strings.Contains(err.Error(), "exceeded quota")
	}
	return false
}

// reconcileService deletes a gang's or service replica's Service, and its
// NetworkPolicy, once no Job of its attempt runs or is wanted.
func (r *runner) reconcileService(ctx context.Context, name string) error {
	ns := r.c.opts.Settings.Namespace
	svc, err := r.c.services.Services(ns).Get(name)
	if err != nil {
		return nil // gone, or never made it into the cache
	}
	attempt := svc.Annotations[AnnotationAttemptID]
	if attempt == "" || r.attemptLive(attempt) {
		return nil
	}
	if policiesOn(r.c.opts.Settings) {
		// Before the Service: a policy whose Service is gone would be
		// found only by the next runner's sweep.
		err := r.c.opts.Client.NetworkingV1().NetworkPolicies(ns).Delete(ctx, policyName(attempt), metav1.DeleteOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case permanent(err):
			r.log.Error("deleting an attempt's NetworkPolicy", "policy", policyName(attempt), "err", err)
		default:
			return fmt.Errorf("deleting network policy %s: %w", policyName(attempt), err)
		}
	}
	err = r.c.opts.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting service %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) jobsOf(node string) []any {
	objs, _ := c.jobs.ByIndex(indexNode, node)
	return objs
}

func (c *Cluster) jobsOfAttempt(attempt string) []any {
	objs, _ := c.jobs.ByIndex(indexAttempt, attempt)
	return objs
}

func (c *Cluster) podsOf(replicaID string) []*corev1.Pod {
	objs, _ := c.pods.ByIndex(indexReplica, replicaID)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func (c *Cluster) job(name string) *batchv1.Job {
	j, err := c.jobList.Jobs(c.opts.Settings.Namespace).Get(name)
	if err != nil || !c.ours(j) {
		return nil
	}
	return j
}

// pod returns a pod of the pool by name, or nil.
func (c *Cluster) pod(name string) *corev1.Pod {
	obj, ok, err := c.pods.GetByKey(c.opts.Settings.Namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*corev1.Pod)
}

// ring notes a change without blocking; one pending ring is enough.
func ring(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// backoff is the wait between retries: doubling, jittered, capped.
func (c *Cluster) backoff(maxWait time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: c.opts.RetryBackoff, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: maxWait}
}

// sleep waits d on the clock; false means ctx ended first.
func (c *Cluster) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.opts.Clock.After(d):
		return true
	}
}

var errNoTarget = errors.New("the virtual node's nodes are gone")
