// Package pools runs the Kubernetes NodePools a fleet declares: one
// kubernetes.Cluster (provider and runner) per pool, started when the pool
// appears, restarted when its spec changes (the new runner adopts the old
// one's Jobs), stopped and its objects deleted when the pool is removed.
// The server wires it; it speaks to the control plane only through
// agentapi.ControlPlane and the small Retirer below.
package pools

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	k8s "k8s.io/client-go/kubernetes"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
)

// Retry is how often a pool whose cluster could not be reached is
// tried again.
const Retry = 30 * time.Second

// Pools runs a kubernetes.Cluster and its runner for each NodePool of
// provider kubernetes that the fleet declares (see the package doc). Its
// own mutex guards the declared and running pools.
type Pools struct {
	cat       *catalog.Catalog
	log       *slog.Logger
	newClient func(model.KubernetesPoolSettings) (k8s.Interface, error)
	// CP is the control plane the runners speak to; set before Run.
	CP agentapi.ControlPlane
	// Nodes, when set (before Run), retires a removed pool's virtual
	// nodes at once, so their attempts requeue without waiting for the
	// heartbeat timeout.
	Nodes Retirer

	changed chan struct{} // rung by SetPools

	mu       sync.Mutex
	declared []*model.NodePool      // the kubernetes pools, as last set
	running  map[string]*kubeRunner // by pool name; guarded by mu
}

// Retirer is the part of the control plane that ends a removed pool's
// virtual nodes.
type Retirer interface {
	// PoolNodes lists the live nodes of pool: id and labels.
	PoolNodes(pool string) []model.Node
	// RetireNode ends node id now, its attempts requeued; idempotent.
	RetireNode(ctx context.Context, id, why string) error
}

type kubeRunner struct {
	pool    *model.NodePool
	cluster *kubernetes.Cluster
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns the pools' runner, with no pool declared yet.
func New(cat *catalog.Catalog, log *slog.Logger) *Pools {
	return &Pools{cat: cat, log: log.With("component", "kubernetes"), newClient: kubernetes.NewClient,
		changed: make(chan struct{}, 1), running: map[string]*kubeRunner{}}
}

// SetPools takes the declared pools (the controller's PoolsChanged hook): it
// keeps the kubernetes ones and wakes Run. Quick; never blocks.
func (k *Pools) SetPools(pools []*model.NodePool, _ time.Time) {
	var kube []*model.NodePool
	for _, p := range pools {
		if p.Spec.Provider == model.ProviderKubernetes {
			kube = append(kube, p)
		}
	}
	k.mu.Lock()
	k.declared = kube
	k.mu.Unlock()
	select {
	case k.changed <- struct{}{}:
	default:
	}
}

// Run reconciles the running pools with the declared ones until ctx ends,
// then stops them all; their Jobs keep running for the next start.
func (k *Pools) Run(ctx context.Context) error {
	tick := time.NewTicker(Retry)
	defer tick.Stop()
	for {
		k.reconcile(ctx)
		select {
		case <-ctx.Done():
			k.mu.Lock()
			all := k.running
			k.running = map[string]*kubeRunner{}
			k.mu.Unlock()
			for _, r := range all {
				r.cancel()
				<-r.done
			}
			return nil
		case <-k.changed:
		case <-tick.C:
		}
	}
}

func (k *Pools) reconcile(ctx context.Context) {
	k.mu.Lock()
	want := map[string]*model.NodePool{}
	for _, p := range k.declared {
		want[p.Name] = p
	}
	var stop, remove []*kubeRunner
	for name, r := range k.running {
		switch p, ok := want[name]; {
		case !ok:
			remove = append(remove, r)
			delete(k.running, name)
		case p.Revision != r.pool.Revision:
			stop = append(stop, r)
			delete(k.running, name)
		}
	}
	var start []*model.NodePool
	for name, p := range want {
		if _, ok := k.running[name]; !ok {
			start = append(start, p)
		}
	}
	k.mu.Unlock()

	for _, r := range append(slices.Clip(stop), remove...) {
		r.cancel()
		<-r.done
	}
	for _, r := range stop {
		k.log.Info("kubernetes pool changed; restarting it", "pool", r.pool.Name)
	}
	for _, r := range remove {
		k.log.Info("kubernetes pool removed; deleting its Jobs, Services and Secrets", "pool", r.pool.Name)
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		k.retire(dctx, r.pool.Name)
		if err := r.cluster.DeleteObjects(dctx); err != nil {
			k.log.Error("deleting the objects of a removed kubernetes pool", "pool", r.pool.Name, "err", err)
		}
		cancel()
	}
	for _, p := range start {
		if ctx.Err() != nil {
			return
		}
		if err := k.start(ctx, p); err != nil {
			k.log.Error("starting kubernetes pool; retrying", "pool", p.Name, "err", err, "retry_in", Retry)
		}
	}
}

// retire ends the virtual nodes of removed pool name now that its runner
// has stopped (a running one would register them again).
func (k *Pools) retire(ctx context.Context, name string) {
	if k.Nodes == nil {
		return
	}
	for _, n := range k.Nodes.PoolNodes(name) {
		if n.Labels[kubernetes.LabelPool] != name {
			continue
		}
		if err := k.Nodes.RetireNode(ctx, n.ID, fmt.Sprintf("kubernetes pool %s removed", name)); err != nil {
			k.log.Error("retiring a virtual node of a removed kubernetes pool", "pool", name, "node_id", n.ID, "err", err)
		}
	}
}

// start builds pool p's Cluster and runs it on its own goroutine.
func (k *Pools) start(ctx context.Context, p *model.NodePool) error {
	var settings model.KubernetesPoolSettings
	if p.Spec.Kubernetes != nil {
		settings = *p.Spec.Kubernetes
	}
	client, err := k.newClient(settings)
	if err != nil {
		return err
	}
	cl, err := kubernetes.New(kubernetes.Options{Pool: p.Name, Settings: settings, Client: client, Catalog: k.cat, Logger: k.log})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &kubeRunner{pool: p, cluster: cl, cancel: cancel, done: make(chan struct{})}
	k.mu.Lock()
	k.running[p.Name] = r
	k.mu.Unlock()
	go func() {
		defer close(r.done)
		k.log.Info("starting kubernetes pool", "pool", p.Name, "context", settings.Context, "namespace", settings.Namespace)
		if err := cl.Start(rctx); err != nil {
			if rctx.Err() == nil {
				k.log.Error("starting kubernetes pool", "pool", p.Name, "err", err)
			}
			return
		}
		if err := cl.Run(rctx, k.CP); err != nil {
			k.log.Error("running kubernetes pool", "pool", p.Name, "err", err)
		}
	}()
	return nil
}

// Inventory adds the running pools' virtual nodes to base's inventory (nil:
// none), for drift.
func (k *Pools) Inventory(base func(context.Context) (map[string][]string, error)) func(context.Context) (map[string][]string, error) {
	return func(ctx context.Context) (map[string][]string, error) {
		out := map[string][]string{}
		if base != nil {
			m, err := base(ctx)
			if err != nil {
				return nil, err
			}
			out = m
		}
		k.mu.Lock()
		running := make([]*kubeRunner, 0, len(k.running))
		for _, r := range k.running {
			running = append(running, r)
		}
		k.mu.Unlock()
		for _, r := range running {
			insts, err := r.cluster.List(ctx)
			if err != nil {
				continue // not started yet: not checked
			}
			ids := make([]string, len(insts))
			for i, in := range insts {
				ids[i] = in.ID
			}
			out[r.pool.Name] = ids
		}
		return out, nil
	}
}
