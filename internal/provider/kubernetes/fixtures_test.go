package kubernetes

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// nodeBuilder builds a cluster node: ready, schedulable, 8 GPUs by default.
type nodeBuilder struct{ n *corev1.Node }

func node(name string) *nodeBuilder {
	return &nodeBuilder{n: &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("96"),
				corev1.ResourceMemory: resource.MustParse("1Ti"),
				DefaultGPUResource:    resource.MustParse("8"),
			},
		},
	}}
}

func (b *nodeBuilder) label(k, v string) *nodeBuilder { b.n.Labels[k] = v; return b }
func (b *nodeBuilder) gpu(product string) *nodeBuilder {
	return b.label(DefaultGPUModelLabel, product)
}
func (b *nodeBuilder) capacity(v string) *nodeBuilder { return b.label(DefaultCapacityTypeLabel, v) }
func (b *nodeBuilder) zone(region, zone string) *nodeBuilder {
	return b.label(LabelRegion, region).label(LabelZone, zone)
}
func (b *nodeBuilder) gpus(n int) *nodeBuilder {
	b.n.Status.Allocatable[DefaultGPUResource] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	return b
}
func (b *nodeBuilder) notReady() *nodeBuilder {
	b.n.Status.Conditions[0].Status = corev1.ConditionFalse
	return b
}
func (b *nodeBuilder) cordoned() *nodeBuilder { b.n.Spec.Unschedulable = true; return b }
func (b *nodeBuilder) deleting() *nodeBuilder {
	b.n.DeletionTimestamp = new(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	b.n.Finalizers = []string{"test"}
	return b
}
func (b *nodeBuilder) obj() *corev1.Node { return b.n }

// h100 is an on-demand H100 node in us-east-1a.
func h100(name string) *nodeBuilder {
	return node(name).gpu("NVIDIA-H100-80GB-HBM3").capacity("on-demand").zone("us-east-1", "us-east-1a").label(LabelInstanceType, "p5.48xlarge")
}

// startCluster starts a Cluster of pool "k8s" on a fake clientset holding
// objs. The fake has no Job controller to mark Jobs finished, so unless s
// says otherwise the pool keeps no finished Jobs: it deletes them.
func startCluster(t *testing.T, s model.KubernetesPoolSettings, objs ...runtime.Object) (*Cluster, *fake.Clientset) {
	t.Helper()
	return startClusterWith(t, s, nil, objs...)
}

// startClusterWith is startCluster with options changed by edit.
func startClusterWith(t *testing.T, s model.KubernetesPoolSettings, edit func(*Options), objs ...runtime.Object) (*Cluster, *fake.Clientset) {
	t.Helper()
	if s.KeepFinished == nil {
		s.KeepFinished = new(model.Duration(0))
	}
	cs := fake.NewClientset(objs...)
	o := Options{Pool: "k8s", Settings: s, Client: cs, SyncWait: 50 * time.Millisecond, RegisterInterval: 10 * time.Millisecond,
		RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond}
	if edit != nil {
		edit(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// run runs c's runner against cp until the test ends.
func run(t *testing.T, c *Cluster, cp agentapi.ControlPlane) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, cp) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// eventually polls cond until it holds or five seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeCP is a hand-written control plane: per node desired sets the test
// sets, a real long poll, and a record of registrations, statuses and logs.
// Like the server, it drops a replica from the desired set once its end is
// reported.
type fakeCP struct {
	mu       sync.Mutex
	changed  chan struct{} // closed at each change
	gen      map[string]uint64
	desired  map[string][]agentapi.ReplicaSpec // by node
	regs     []agentapi.Registration
	latest   map[string]agentapi.ReplicaStatus
	history  map[string][]agentapi.Phase
	logs     map[string][]byte
	eof      map[string]bool
	logCalls int
}

func newFakeCP() *fakeCP {
	return &fakeCP{changed: make(chan struct{}), gen: map[string]uint64{}, desired: map[string][]agentapi.ReplicaSpec{},
		latest: map[string]agentapi.ReplicaStatus{}, history: map[string][]agentapi.Phase{}, logs: map[string][]byte{}, eof: map[string]bool{}}
}

func (f *fakeCP) bumpLocked(node string) {
	f.gen[node]++
	close(f.changed)
	f.changed = make(chan struct{})
}

// want sets node's desired set.
func (f *fakeCP) want(node string, specs ...agentapi.ReplicaSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.desired[node] = slices.Clone(specs) // Sync edits it
	f.bumpLocked(node)
}

// stop marks every desired replica of attempt Stop.
func (f *fakeCP) stop(node, attempt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.desired[node] {
		if f.desired[node][i].AttemptID == attempt {
			f.desired[node][i].Stop = true
		}
	}
	f.bumpLocked(node)
}

func (f *fakeCP) Register(_ context.Context, r agentapi.Registration) (agentapi.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.regs = append(f.regs, r)
	return agentapi.RegisterResponse{NodeID: r.NodeID, HeartbeatInterval: model.Duration(time.Second)}, nil
}

func (f *fakeCP) Sync(ctx context.Context, req agentapi.SyncRequest) (agentapi.SyncResponse, error) {
	f.mu.Lock()
	for _, s := range req.Statuses {
		if last, ok := f.latest[s.ID]; !ok || last.Phase != s.Phase {
			f.history[s.ID] = append(f.history[s.ID], s.Phase)
		}
		f.latest[s.ID] = s
		if ended(s.Phase) {
			before := len(f.desired[req.NodeID])
			f.desired[req.NodeID] = slices.DeleteFunc(f.desired[req.NodeID], func(r agentapi.ReplicaSpec) bool { return r.ID == s.ID })
			if len(f.desired[req.NodeID]) != before {
				f.bumpLocked(req.NodeID)
			}
		}
	}
	if req.Generation == f.gen[req.NodeID] && req.Wait > 0 {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(req.Wait.D()):
		case <-ctx.Done():
			return agentapi.SyncResponse{}, ctx.Err()
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	return agentapi.SyncResponse{Generation: f.gen[req.NodeID], Replicas: slices.Clone(f.desired[req.NodeID])}, nil
}

func (f *fakeCP) AppendLog(_ context.Context, c agentapi.LogChunk) (agentapi.LogAck, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCalls++
	have := f.logs[c.ReplicaID]
	if c.Offset == int64(len(have)) {
		f.logs[c.ReplicaID] = append(have, c.Data...)
		if c.EOF {
			f.eof[c.ReplicaID] = true
		}
	} else if c.Offset < int64(len(have)) && c.Offset+int64(len(c.Data)) > int64(len(have)) {
		f.logs[c.ReplicaID] = append(have, c.Data[int64(len(have))-c.Offset:]...)
	}
	return agentapi.LogAck{Size: int64(len(f.logs[c.ReplicaID])), Complete: f.eof[c.ReplicaID]}, nil
}

func (f *fakeCP) FetchArchive(context.Context, string) (io.ReadCloser, error) {
	return nil, fmt.Errorf("no archives")
}

func (f *fakeCP) status(id string) agentapi.ReplicaStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latest[id]
}

func (f *fakeCP) registrations() []agentapi.Registration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.regs)
}

func (f *fakeCP) log(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.logs[id]), f.eof[id]
}

// spec is replica rank of a job's first attempt as the controller hands it
// out, on GPUs gpus of the node.
func spec(job string, rank, world int, gpus ...int) agentapi.ReplicaSpec {
	attempt := model.AttemptID(job, 1)
	return agentapi.ReplicaSpec{
		ID: model.ReplicaID(attempt, rank), JobID: job, AttemptID: attempt, Attempt: 1, Rank: rank,
		Command: []string{"python", "train.py"}, Image: "ghcr.io/acme/train:1", Project: "nlp",
		Tags: map[string]string{"team": "nlp", "kwok-duration": "2s"},
		Env: map[string]string{
			"GPUFLEET_JOB_ID": job, "GPUFLEET_ATTEMPT": "1", "CUDA_VISIBLE_DEVICES": "0",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512", "WORLD_SIZE": strconv.Itoa(world),
			"RANK": strconv.Itoa(rank), "NODE_RANK": strconv.Itoa(rank), "LOCAL_WORLD_SIZE": strconv.Itoa(max(len(gpus), 1)),
		},
		GPUs: gpus, Signal: "SIGTERM", Grace: model.Duration(45 * time.Second),
	}
}

// podOf is the pod the Job controller makes for completion index i of job,
// on node, in phase.
func podOf(job *batchv1.Job, i int, nodeName string, phase corev1.PodPhase) *corev1.Pod {
	ann := maps.Clone(job.Spec.Template.Annotations)
	ann[AnnotationCompletionIndex] = strconv.Itoa(i)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-abcde", job.Name, i), Namespace: job.Namespace,
			Labels: maps.Clone(job.Spec.Template.Labels), Annotations: ann, CreationTimestamp: metav1.Now()},
		Spec:   *job.Spec.Template.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: phase},
	}
	p.Spec.NodeName = nodeName
	if phase != corev1.PodPending {
		p.Status.StartTime = new(metav1.Now())
	}
	return p
}

// exited sets a pod's container to have exited with code.
func exited(p *corev1.Pod, code int32) *corev1.Pod {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Now()}}}}
	return p
}
