package pools

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
)

// stubCP registers nodes and long-polls an empty desired set.
type stubCP struct {
	mu      sync.Mutex
	regs    []agentapi.Registration
	retired []string
}

func (s *stubCP) Register(_ context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regs = append(s.regs, r)
	return agentapi.RegisterResponse{NodeID: r.NodeID}, nil
}

func (s *stubCP) Sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, error) {
	select {
	case <-ctx.Done():
		return agentapi.SyncResponse{}, ctx.Err()
	case <-time.After(req.Wait.D()):
	}
	return agentapi.SyncResponse{Generation: 1}, nil
}

func (s *stubCP) AppendLog(_ context.Context, c agentapi.LogChunk) (agentapi.LogAck, error) {
	return agentapi.LogAck{Size: c.Offset + int64(len(c.Data))}, nil
}

func (s *stubCP) FetchArchive(context.Context, string) (io.ReadCloser, error) { return nil, io.EOF }

func (s *stubCP) registered(pool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.regs {
		if r.Pool == pool {
			n++
		}
	}
	return n
}

// PoolNodes lists the registered virtual nodes of pool, as the controller
// would.
func (s *stubCP) PoolNodes(pool string) []model.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []model.Node
	for _, r := range s.regs {
		if !seen[r.NodeID] && r.Pool == pool {
			seen[r.NodeID] = true
			out = append(out, model.Node{ID: r.NodeID, Pool: r.Pool, Labels: r.Labels})
		}
	}
	return out
}

// RetireNode records that node id was retired.
func (s *stubCP) RetireNode(_ context.Context, id, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired = append(s.retired, id+": "+why)
	return nil
}

func TestPoolsFollowTheFleet(t *testing.T) {
	gpuNode := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{kubernetes.DefaultGPUModelLabel: "NVIDIA-L4"}},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{kubernetes.DefaultGPUResource: resource.MustParse("4")},
		},
	}
	leftover := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "gf-old", Namespace: kubernetes.DefaultNamespace,
		Labels: map[string]string{kubernetes.LabelManagedBy: "gke"}}}
	cs := fake.NewClientset(gpuNode, leftover)
	var mu sync.Mutex
	clients := 0
	k := New(nil, slog.New(slog.DiscardHandler))
	k.newClient = func(model.KubernetesPoolSettings) (k8s.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		clients++
		return cs, nil
	}
	cp := &stubCP{}
	k.CP, k.Nodes = cp, cp
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pool := func(rev int, price float64) *model.NodePool {
		return &model.NodePool{Name: "gke", Revision: rev, Spec: model.NodePoolSpec{Provider: model.ProviderKubernetes,
			Kubernetes: &model.KubernetesPoolSettings{PricePerGPUHour: price}}}
	}
	sim := &model.NodePool{Name: "sim", Spec: model.NodePoolSpec{Provider: model.ProviderSim}}

	k.SetPools([]*model.NodePool{sim, pool(1, 1)}, time.Now())
	wait("the pool's virtual node", func() bool { return cp.registered("gke") > 0 })
	inv, err := k.Inventory(nil)(context.Background())
	if err != nil || len(inv["gke"]) != 1 {
		t.Errorf("inventory = %v, %v", inv, err)
	}

	k.SetPools([]*model.NodePool{sim, pool(2, 3)}, time.Now()) // changed: restarted
	wait("a second client", func() bool { mu.Lock(); defer mu.Unlock(); return clients == 2 })
	wait("the new price registered", func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		last := cp.regs[len(cp.regs)-1]
		return last.PricePerHour == 12
	})

	k.SetPools([]*model.NodePool{sim}, time.Now()) // removed: its objects go
	wait("the removed pool's Jobs deleted", func() bool {
		_, err := cs.BatchV1().Jobs(kubernetes.DefaultNamespace).Get(context.Background(), "gf-old", metav1.GetOptions{})
		return err != nil
	})
	cp.mu.Lock()
	node := cp.regs[0].NodeID
	if want := []string{node + ": kubernetes pool gke removed"}; !slices.Equal(cp.retired, want) {
		t.Errorf("retired %q, want %q", cp.retired, want)
	}
	cp.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.running) != 0 {
		t.Errorf("still running: %v", k.running)
	}
}
