package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Options configure a Cluster. Zero optional fields take the defaults noted.
type Options struct {
	// Pool is the NodePool's name: the provider name, the value of
	// LabelManagedBy on every object, and the prefix of virtual node ids.
	// Required; a valid name (model.ValidName).
	Pool string
	// Settings is the pool's kubernetes block; zero fields take their
	// defaults.
	Settings model.KubernetesPoolSettings
	// Client talks to the cluster (NewClient, or a fake in tests).
	// Required.
	Client kubernetes.Interface
	// Catalog names GPU models, gives their memory and prices nodes by
	// instance type; nil keeps model labels as they are (known families
	// still map to catalog names) and leaves nodes the pool does not price
	// unpriced.
	Catalog *catalog.Catalog
	Clock   clock.Clock   // default clock.Real
	Logger  *slog.Logger  // default: discard
	Resync  time.Duration // informers' resync period; 0: none

	// Workers bound the concurrent creates and deletes (default 32).
	Workers int
	// LogStreams bound the pod logs streamed at once (default 256).
	LogStreams int
	// SyncWait is the longest a virtual node's sync waits on the control
	// plane (default 10s; capped by its heartbeat interval).
	SyncWait time.Duration
	// RegisterInterval is the least time between two registrations of a
	// virtual node whose GPUs changed, so that nodes joining one by one
	// cost a few registrations, not one each (default 2s).
	RegisterInterval time.Duration
	// RetryBackoff is the first wait after a failed call to the control
	// plane or a failed log stream; it doubles up to MaxRetryBackoff
	// (defaults 1s and 30s).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// LogChunkSize is the most bytes of output sent in one AppendLog
	// (default 256 KiB).
	LogChunkSize int
}

func (o Options) validate() error {
	var fe model.FieldErrors
	if !model.ValidName(o.Pool) {
		fe.Add("pool", fmt.Sprintf("%q is not a valid pool name", o.Pool))
	}
	if o.Client == nil {
		fe.Add("client", "is required")
	}
	fe = append(fe, ValidateSettings(&o.Settings, "settings")...)
	for name, v := range map[string]int64{"workers": int64(o.Workers), "logStreams": int64(o.LogStreams), "logChunkSize": int64(o.LogChunkSize),
		"syncWait": int64(o.SyncWait), "registerInterval": int64(o.RegisterInterval), "retryBackoff": int64(o.RetryBackoff),
		"maxRetryBackoff": int64(o.MaxRetryBackoff), "resync": int64(o.Resync)} {
		if v < 0 {
			fe.Add(name, "must not be negative")
		}
	}
	return fe.Err()
}

func (o Options) withDefaults() Options {
	o.Settings = withDefaults(o.Settings)
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers == 0 {
		o.Workers = 32
	}
	if o.LogStreams == 0 {
		o.LogStreams = 256
	}
	if o.SyncWait == 0 {
		o.SyncWait = 10 * time.Second
	}
	if o.RegisterInterval == 0 {
		o.RegisterInterval = 2 * time.Second
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = time.Second
	}
	if o.MaxRetryBackoff == 0 {
		o.MaxRetryBackoff = max(30*time.Second, o.RetryBackoff)
	}
	if o.LogChunkSize == 0 {
		o.LogChunkSize = 256 << 10
	}
	return o
}

// Cluster is one Kubernetes cluster as a gpufleet pool: a fixed-capacity
// provider whose machines are its virtual nodes, and (Run) their runner.
// Its methods are safe for concurrent use once Start has returned.
type Cluster struct {
	opts    Options
	log     *slog.Logger
	grouper *grouper

	started chan struct{} // closed when Start's caches have synced

	nodes    corelisters.NodeLister
	jobs     cache.Indexer
	pods     cache.Indexer
	services corelisters.ServiceLister
	jobList  batchlisters.JobLister

	// hooks receive the informers' events; Run sets them.
	mu    sync.Mutex
	hooks *runner

	// goneNodes remembers why recently deleted nodes went, for the reason
	// a lost replica reports. Guarded by mu; bounded.
	goneNodes map[string]string
}

var (
	_ provider.Provider      = (*Cluster)(nil)
	_ provider.FixedCapacity = (*Cluster)(nil)
)

// Informer indexes.
const (
	indexNode    = "node"    // jobs by LabelNode
	indexReplica = "replica" // pods by replica id
	indexAttempt = "attempt" // jobs by AnnotationAttemptID
)

// New checks opts and returns a Cluster; it contacts nothing until Start.
func New(opts Options) (*Cluster, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("configuring kubernetes pool %s: %w", opts.Pool, err)
	}
	opts = opts.withDefaults()
	return &Cluster{
		opts:      opts,
		log:       opts.Logger.With("pool", opts.Pool),
		grouper:   newGrouper(opts.Pool, opts.Settings, opts.Catalog),
		started:   make(chan struct{}),
		goneNodes: map[string]string{},
	}, nil
}

// Start starts the informers on nodes (cluster-wide) and on the pool's
// Jobs, pods and Services (its namespace, its label), and waits until their
// caches are filled. They run until ctx ends. Call it once, before any
// other method.
func (c *Cluster) Start(ctx context.Context) error {
	cs := c.opts.Client
	nodeFactory := informers.NewSharedInformerFactory(cs, c.opts.Resync)
	owned := informers.NewSharedInformerFactoryWithOptions(cs, c.opts.Resync,
		informers.WithNamespace(c.opts.Settings.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + c.opts.Pool }))

	nodeInf := nodeFactory.Core().V1().Nodes()
	jobInf := owned.Batch().V1().Jobs()
	podInf := owned.Core().V1().Pods()
	svcInf := owned.Core().V1().Services()
	for _, inf := range []cache.SharedIndexInformer{nodeInf.Informer(), jobInf.Informer(), podInf.Informer(), svcInf.Informer()} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("starting informers: %w", err)
		}
	}
	if err := jobInf.Informer().AddIndexers(cache.Indexers{
		indexNode: func(obj any) ([]string, error) {
			if j, ok := obj.(*batchv1.Job); ok && c.ours(j) && j.Labels[LabelNode] != "" {
				return []string{j.Labels[LabelNode]}, nil
			}
			return nil, nil
		},
		indexAttempt: func(obj any) ([]string, error) {
			if j, ok := obj.(*batchv1.Job); ok && c.ours(j) && j.Annotations[AnnotationAttemptID] != "" {
				return []string{j.Annotations[AnnotationAttemptID]}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("indexing jobs: %w", err)
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{
		indexReplica: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok && c.ours(p) {
				if id, ok := replicaOf(p); ok {
					return []string{id}, nil
				}
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("indexing pods: %w", err)
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.nodesChanged() },
			UpdateFunc: func(old, cur any) { c.nodeUpdated(old, cur) },
			DeleteFunc: c.nodeDeleted,
		}},
		{jobInf.Informer(), c.objectHandler()},
		{jobInf.Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: c.jobDeleted}},
		{podInf.Informer(), c.objectHandler()},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	c.nodes, c.jobList, c.services = nodeInf.Lister(), jobInf.Lister(), svcInf.Lister()
	c.jobs, c.pods = jobInf.Informer().GetIndexer(), podInf.Informer().GetIndexer()
	nodeFactory.Start(ctx.Done())
	owned.Start(ctx.Done())
	for typ, ok := range nodeFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("filling the %v cache of pool %s: %w", typ, c.opts.Pool, context.Cause(ctx))
		}
	}
	for typ, ok := range owned.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("filling the %v cache of pool %s: %w", typ, c.opts.Pool, context.Cause(ctx))
		}
	}
	close(c.started)
	c.log.Info("kubernetes pool started", "namespace", c.opts.Settings.Namespace, "groups", len(c.groups()))
	return nil
}

// stripManagedFields drops what the driver never reads, to keep the caches
// small on large clusters. It strips a copy: an object from a watch may be
// shared (a fake clientset's is its tracker's).
func stripManagedFields(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok || len(m.GetManagedFields()) == 0 {
		return obj, nil
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return obj, nil
	}
	c := ro.DeepCopyObject()
	c.(metav1.Object).SetManagedFields(nil)
	return c, nil
}

// ours reports whether an object carries this pool's label: a fake
// clientset's watch does not filter by label.
func (c *Cluster) ours(obj metav1.Object) bool { return obj.GetLabels()[LabelManagedBy] == c.opts.Pool }

var errNotStarted = errors.New("kubernetes pool not started")

func (c *Cluster) ready(ctx context.Context) error {
	select {
	case <-c.started:
		return nil
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("pool %s: %w", c.opts.Pool, errNotStarted)
}

// groups returns the current virtual nodes' groups, by id.
func (c *Cluster) groups() []*group {
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return nil // a lister only fails on a bad selector
	}
	return c.grouper.groups(nodes)
}

// Name returns the pool name.
func (c *Cluster) Name() string { return c.opts.Pool }

// Offers lists one offer per virtual node with GPUs: its GPU model,
// capacity type, region and zone, all its GPUs and their price.
func (c *Cluster) Offers(ctx context.Context) ([]model.Offer, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	var out []model.Offer
	for _, g := range c.groups() {
		if o := g.offer(c.opts.Pool); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// Launch always fails: kube-scheduler, not gpufleet, places work on the
// cluster's nodes, and a cluster autoscaler adds them.
func (c *Cluster) Launch(_ context.Context, req provider.LaunchRequest) (provider.Instance, error) {
	return provider.Instance{}, fmt.Errorf("launching %s on kubernetes pool %s (the cluster's own autoscaler adds nodes): %w", req.Offer.InstanceType, c.opts.Pool, provider.ErrFixedCapacity)
}

// Terminate always fails: gpufleet does not remove a cluster's nodes.
func (c *Cluster) Terminate(_ context.Context, id string) error {
	return fmt.Errorf("terminating %s on kubernetes pool %s: %w", id, c.opts.Pool, provider.ErrFixedCapacity)
}

// List returns one running instance per virtual node, its id the node id.
func (c *Cluster) List(ctx context.Context) ([]provider.Instance, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	groups := c.groups()
	out := make([]provider.Instance, 0, len(groups))
	for _, g := range groups {
		out = append(out, provider.Instance{ID: g.id, Offer: g.offer(c.opts.Pool), State: provider.StateRunning, LaunchedAt: g.since,
			Labels: map[string]string{LabelPool: c.opts.Pool}})
	}
	return out, nil
}

// Machines returns the virtual nodes.
func (c *Cluster) Machines(ctx context.Context) ([]model.Node, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	groups := c.groups()
	out := make([]model.Node, 0, len(groups))
	for _, g := range groups {
		out = append(out, g.node(c.opts.Pool))
	}
	return out, nil
}

// Object is a Kubernetes object the driver created.
type Object struct {
	Kind      string            `json:"kind"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Pool marks an object that lives as long as the pool, not an
	// attempt: the pool's default-deny NetworkPolicy.
	Pool bool `json:"pool,omitempty"`
}

// Objects lists, from the API server, every Job, pod, Service, Secret and
// NetworkPolicy of the pool (label LabelManagedBy), ordered by kind and
// name, so a test or an operator can check that nothing leaked. A pool
// that makes no NetworkPolicies and may not list them lists none.
func (c *Cluster) Objects(ctx context.Context) ([]Object, error) {
	ns, opts := c.opts.Settings.Namespace, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + c.opts.Pool}
	var out []Object
	add := func(kind string, m metav1.Object) {
		if c.ours(m) {
			out = append(out, Object{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName(), Labels: m.GetLabels()})
		}
	}
	jobs, err := c.opts.Client.BatchV1().Jobs(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing jobs of pool %s: %w", c.opts.Pool, err)
	}
	for i := range jobs.Items {
		add("Job", &jobs.Items[i])
	}
	pods, err := c.opts.Client.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing pods of pool %s: %w", c.opts.Pool, err)
	}
	for i := range pods.Items {
		add("Pod", &pods.Items[i])
	}
	svcs, err := c.opts.Client.CoreV1().Services(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing services of pool %s: %w", c.opts.Pool, err)
	}
	for i := range svcs.Items {
		add("Service", &svcs.Items[i])
	}
	secrets, err := c.opts.Client.CoreV1().Secrets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing secrets of pool %s: %w", c.opts.Pool, err)
	}
	for i := range secrets.Items {
		add("Secret", &secrets.Items[i])
	}
	policies, err := c.opts.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, opts)
	switch {
	case err == nil:
		for i := range policies.Items {
			add("NetworkPolicy", &policies.Items[i])
			if np := &policies.Items[i]; c.ours(np) && np.Name == poolPolicyName(c.opts.Pool) {
				out[len(out)-1].Pool = true
			}
		}
	case policiesOn(c.opts.Settings) || !apierrors.IsForbidden(err):
		return nil, fmt.Errorf("listing network policies of pool %s: %w", c.opts.Pool, err)
	}
	slices.SortFunc(out, func(a, b Object) int {
		if a.Kind != b.Kind {
			return compareStrings(a.Kind, b.Kind)
		}
		return compareStrings(a.Name, b.Name)
	})
	return out, nil
}

// DeleteObjects deletes every Job (with its pods), Service, Secret and
// NetworkPolicy of the pool, for when the pool is removed. Objects already
// gone are no error.
func (c *Cluster) DeleteObjects(ctx context.Context) error {
	objs, err := c.Objects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	bg := metav1.DeletePropagationBackground
	for _, o := range objs {
		var err error
		switch o.Kind {
		case "Job":
			err = c.opts.Client.BatchV1().Jobs(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		case "Service":
			err = c.opts.Client.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		case "Secret":
			err = c.opts.Client.CoreV1().Secrets(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		case "NetworkPolicy":
			err = c.opts.Client.NetworkingV1().NetworkPolicies(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
		default:
			continue // pods go with their Jobs
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", describe(o.Kind, o.Name), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting the objects of pool %s: %w", c.opts.Pool, errors.Join(errs...))
	}
	return nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
