package kubernetes_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/kubetest"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// These tests run the driver and the real controller against a real
// control plane (internal/kubetest): kube-apiserver, kube-scheduler,
// kube-controller-manager's Job controller and garbage collector, and KWOK
// playing the kubelets. They skip without the binaries (tools/kube/build.sh)
// unless CI=true.

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// testPoolLabel keeps each test's pool on its own nodes of the shared
// control plane (the pool's nodeSelector).
const testPoolLabel = "it.gpufleet.dev/pool"

// Node labels of the two kinds of node the tests use.
const (
	h100Product = "NVIDIA-H100-80GB-HBM3"
	a100Product = "NVIDIA-A100-SXM4-80GB"
)

// kubeEnv is one pool on the shared control plane: its namespace and nodes,
// a controller on SQLite, and the driver running against both.
type kubeEnv struct {
	t    *testing.T
	kc   *kubetest.Cluster
	pool string
	ns   string
	ctx  context.Context
	cl   *kubernetes.Cluster
	ctrl *controller.Controller
	logs *logstore.Store

	// seen records every Job and pod of the namespace as last seen, deleted
	// ones included, so a test can look at objects the driver has already
	// cleaned up.
	mu       sync.Mutex
	seenJobs map[string]*batchv1.Job
	seenPods map[string]*corev1.Pod
	deleted  map[string]bool // "Job/NAME", "Pod/NAME"

	log  *slog.Logger
	runs *sync.WaitGroup // the env's goroutines, waited for at cleanup
}

// nodeGroup is n KWOK nodes made from spec.
type nodeGroup struct {
	n    int
	spec kubetest.NodeSpec
}

// newKubeEnv starts pool on the nodes of groups, and waits until the
// controller has its ready virtual nodes with gpus GPUs in all.
func newKubeEnv(t *testing.T, name string, gpus int, groups ...nodeGroup) *kubeEnv {
	t.Helper()
	kc := kubetest.Shared(t)
	// Unique on the shared control plane, for -count=N.
	pool := name + "-" + strings.ToLower(rand.Text()[:6])
	ctx, cancel := context.WithCancel(context.Background())
	e := &kubeEnv{t: t, kc: kc, pool: pool, ns: "it-" + pool, ctx: ctx,
		seenJobs: map[string]*batchv1.Job{}, seenPods: map[string]*corev1.Pod{}, deleted: map[string]bool{}}
	var runs sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		runs.Wait()
	})
	cs := kc.Client()
	// The driver does not create its namespace (docs/kubernetes.md: the
	// operator does, with the RBAC).
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", e.ns, err)
	}
	e.record(ctx)
	setup, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	for _, g := range groups {
		g.spec.Labels = map[string]string{testPoolLabel: pool}
		kc.AddGPUNodes(setup, g.n, g.spec)
	}

	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if e.logs, err = logstore.New(filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	var logBuf testutil.SyncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller and driver log:\n%s", logBuf.String())
		}
	})
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.ctrl, err = controller.New(ctx, controller.Config{Store: st, Logs: e.logs, CheckpointDir: filepath.Join(dir, "ckpt"), Log: log,
		Fatal: func(err error) { t.Errorf("store failed: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.ctrl.Close)
	// Cleanups run last first: stop everything before the controller and
	// the store close.
	t.Cleanup(func() {
		cancel()
		runs.Wait()
	})
	runs.Go(func() {
		if err := e.ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("controller: %v", err)
		}
	})

	e.log, e.runs = log, &runs
	e.cl = e.startPool(t, pool, e.ns)
	e.eventually("the virtual nodes ready", 20*time.Second, func() bool {
		n := 0
		for _, node := range e.ctrl.Nodes() {
			if node.Pool == pool && node.State == model.NodeReady {
				n += len(node.GPUs)
			}
		}
		return n == gpus
	})
	return e
}

// keepFinished is how long the test pools keep finished Jobs.
const keepFinished = 2 * time.Second

// startPool starts and runs a driver for pool, on the env's nodes, with
// its Jobs in namespace ns, until the test ends.
func (e *kubeEnv) startPool(t *testing.T, pool, ns string) *kubernetes.Cluster {
	t.Helper()
	// The client comes from the harness's kubeconfig, as a pool's would.
	// Finished Jobs stay 2 s: the controller manager's TTL-after-finished
	// controller deletes them, so noObjectsLeft sees that work too.
	settings := model.KubernetesPoolSettings{Kubeconfig: e.kc.Kubeconfig, Context: e.kc.Context, Namespace: ns,
		NodeSelector: map[string]string{testPoolLabel: e.pool}, PricePerGPUHour: 2, KeepFinished: new(model.Duration(keepFinished))}
	client, err := kubernetes.NewClient(settings)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kubernetes.New(kubernetes.Options{Pool: pool, Settings: settings, Client: client, Logger: e.log,
		RegisterInterval: 100 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.runs.Go(func() {
		if err := cl.Run(e.ctx, e.ctrl); err != nil {
			e.t.Errorf("Run of pool %s: %v", pool, err) // the env's test: it outlives t
		}
	})
	return cl
}

// record keeps every Job and pod of the namespace in seenJobs and seenPods.
func (e *kubeEnv) record(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(e.kc.Client(), 0, informers.WithNamespace(e.ns))
	handler := func(kind string) cache.ResourceEventHandlerFuncs {
		put := func(obj any) {
			e.mu.Lock()
			defer e.mu.Unlock()
			switch o := obj.(type) {
			case *batchv1.Job:
				e.seenJobs[o.Name] = o
			case *corev1.Pod:
				e.seenPods[o.Name] = o
			}
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    put,
			UpdateFunc: func(_, cur any) { put(cur) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if m, ok := obj.(metav1.Object); ok {
					e.mu.Lock()
					e.deleted[kind+"/"+m.GetName()] = true
					e.mu.Unlock()
				}
			},
		}
	}
	for kind, inf := range map[string]cache.SharedIndexInformer{"Job": f.Batch().V1().Jobs().Informer(), "Pod": f.Core().V1().Pods().Informer()} {
		if _, err := inf.AddEventHandler(handler(kind)); err != nil {
			e.t.Fatal(err)
		}
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

// eventually polls cond every 20 ms until it holds, failing the test after
// limit.
func (e *kubeEnv) eventually(what string, limit time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond) // polling other processes; bounded by the deadline
	}
}

// submit queues a job of replicas × gpus GPUs with tags (KWOK's scripts)
// and the given tweaks.
func (e *kubeEnv) submit(t *testing.T, replicas, gpus int, tags map[string]string, tweak func(*model.JobSpec)) *model.Job {
	t.Helper()
	spec := model.JobSpec{Replicas: replicas, Resources: model.Resources{GPUs: float64(gpus)},
		Run:        model.RunSpec{Command: []string{"python", "train.py"}, Image: "ghcr.io/acme/train:1"},
		Checkpoint: model.Checkpoint{Grace: model.Duration(2 * time.Second)}}
	if tweak != nil {
		tweak(&spec)
	}
	spec.Default()
	job, _, err := e.ctrl.Submit(e.ctx, controller.Submission{Project: "nlp", Tags: tags, Spec: spec})
	if err != nil {
		t.Fatalf("submitting: %v", err)
	}
	return job
}

// waitJob waits until job id is in a final state and returns it.
func (e *kubeEnv) waitJob(t *testing.T, id string, limit time.Duration) *model.Job {
	t.Helper()
	var j *model.Job
	e.eventually("job "+id+" to end", limit, func() bool {
		var err error
		j, err = e.ctrl.Job(id)
		return err == nil && j.State.Terminal()
	})
	return j
}

// jobsOf returns the Kubernetes Jobs seen for gpufleet job id.
func (e *kubeEnv) jobsOf(id string) []*batchv1.Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*batchv1.Job
	for _, j := range e.seenJobs {
		if j.Labels[kubernetes.LabelJobID] == id {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *batchv1.Job) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

// podsOf returns the pods seen for Kubernetes Job name.
func (e *kubeEnv) podsOf(job string) []*corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range e.seenPods {
		if p.Labels["batch.kubernetes.io/job-name"] == job {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

func (e *kubeEnv) gone(kind, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deleted[kind+"/"+name]
}

// noObjectsLeft waits until the pool has no Job, pod, Service, Secret or
// NetworkPolicy left but those that live as long as the pool (its default
// deny).
func (e *kubeEnv) noObjectsLeft(t *testing.T) {
	t.Helper()
	e.eventually("no objects left", 20*time.Second, func() bool {
		left, err := e.cl.Objects(e.ctx)
		return err == nil && !slices.ContainsFunc(left, func(o kubernetes.Object) bool { return !o.Pool })
	})
}

// logComplete waits until the server has closed the log of rank 0 of
// attempt of job: KWOK serves no pod logs, so the driver gives up on them,
// and that must end the log rather than hold anything up.
func (e *kubeEnv) logComplete(t *testing.T, job string, attempt int) {
	t.Helper()
	e.eventually("the log of "+job+" closed", 20*time.Second, func() bool {
		_, complete, _ := e.logs.Size(logstore.Key{JobID: job, Attempt: attempt, Rank: 0})
		return complete
	})
}

// affinityValues returns the values a Job's pods require of node label key.
func affinityValues(j *batchv1.Job, key string) []string {
	var out []string
	a := j.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			if r.Key == key {
				out = append(out, r.Values...)
			}
		}
	}
	return out
}

// nodeProducts maps node name to GPU product for the env's nodes.
func (e *kubeEnv) nodeProducts(t *testing.T) map[string]string {
	t.Helper()
	nodes, err := e.kc.Client().CoreV1().Nodes().List(e.ctx, metav1.ListOptions{LabelSelector: testPoolLabel + "=" + e.pool})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels[kubetest.LabelGPUProduct]
	}
	return out
}

// TestRealCluster runs jobs through the controller, the driver and a real
// control plane with 4 KWOK nodes × 8 GPUs: 2 H100 spot, 2 A100 on-demand.
func TestRealCluster(t *testing.T) {
	t.Parallel()
	began := time.Now()
	h100Spot := kubetest.NodeSpec{GPUProduct: h100Product, CapacityType: "spot"}
	a100 := kubetest.NodeSpec{GPUProduct: a100Product, CapacityType: "on-demand", InstanceType: "p4de.24xlarge"}
	e := newKubeEnv(t, "real", 32, nodeGroup{2, h100Spot}, nodeGroup{2, a100})
	t.Logf("pool ready after %s", time.Since(began).Round(time.Millisecond))
	products := e.nodeProducts(t)

	t.Run("single-GPU jobs run to completion", func(t *testing.T) {
		began := time.Now()
		// Three that may not run on spot (the default), so on the A100s,
		// and one that asks for H100s and allows spot.
		var ids []string
		for range 3 {
			ids = append(ids, e.submit(t, 1, 1, nil, nil).ID)
		}
		h100 := e.submit(t, 1, 1, map[string]string{"team": "nlp"}, func(s *model.JobSpec) {
			s.Resources.GPU.Models = []string{"H100"}
			s.Spot = model.SpotAllowed
		})
		ids = append(ids, h100.ID)
		for _, id := range ids {
			j := e.waitJob(t, id, 30*time.Second)
			if j.State != model.JobSucceeded || j.ExitCode == nil || *j.ExitCode != 0 || j.Attempts != 1 {
				t.Fatalf("job %s ended %s (%s), exit %v, attempts %d; want succeeded, exit 0, one attempt", id, j.State, j.Reason, j.ExitCode, j.Attempts)
			}
			jobs := e.jobsOf(id)
			if len(jobs) != 1 {
				t.Fatalf("job %s ran as %d Kubernetes Jobs, want 1", id, len(jobs))
			}
			k := jobs[0]
			wantProduct, wantCapacity := a100Product, "on-demand"
			if id == h100.ID {
				wantProduct, wantCapacity = h100Product, "spot"
				if got := k.Spec.Template.Annotations[kubernetes.AnnotationTagPrefix+"team"]; got != "nlp" {
					t.Errorf("pod annotation of tag team = %q, want nlp", got)
				}
			}
			wantLabels := map[string]string{kubernetes.LabelManagedBy: e.pool, kubernetes.LabelJobID: id,
				kubernetes.LabelAttempt: model.AttemptID(id, 1), kubernetes.LabelProject: "nlp"}
			for key, want := range wantLabels {
				if k.Labels[key] != want || k.Spec.Template.Labels[key] != want {
					t.Errorf("Job %s label %s = %q (pods %q), want %q", k.Name, key, k.Labels[key], k.Spec.Template.Labels[key], want)
				}
			}
			if k.Labels[kubernetes.LabelNode] == "" {
				t.Errorf("Job %s has no %s label", k.Name, kubernetes.LabelNode)
			}
			if got := affinityValues(k, kubetest.LabelGPUProduct); !slices.Equal(got, []string{wantProduct}) {
				t.Errorf("Job %s requires GPU products %v, want [%s]", k.Name, got, wantProduct)
			}
			if got := affinityValues(k, kubetest.LabelCapacityType); !slices.Equal(got, []string{wantCapacity}) {
				t.Errorf("Job %s requires capacity types %v, want [%s]", k.Name, got, wantCapacity)
			}
			if ttl := k.Spec.TTLSecondsAfterFinished; ttl == nil || *ttl != int32(keepFinished.Seconds()) {
				t.Errorf("Job %s ttlSecondsAfterFinished = %v, want %v", k.Name, ttl, keepFinished)
			}
			if got := k.Spec.Template.Spec.NodeSelector[testPoolLabel]; got != e.pool {
				t.Errorf("Job %s selects %s=%q, want the pool's node selector", k.Name, testPoolLabel, got)
			}
			c := k.Spec.Template.Spec.Containers[0]
			if q := c.Resources.Limits[kubetest.ResourceGPU]; q.Value() != 1 || c.Image != "ghcr.io/acme/train:1" {
				t.Errorf("Job %s container: %d GPUs, image %s", k.Name, q.Value(), c.Image)
			}
			pods := e.podsOf(k.Name)
			if len(pods) != 1 || products[pods[0].Spec.NodeName] != wantProduct {
				t.Errorf("Job %s ran pods %d, the first on %v; want one on a %s node", k.Name, len(pods), nodeNames(pods), wantProduct)
			}
		}
		t.Logf("4 jobs succeeded after %s", time.Since(began).Round(time.Millisecond))
		// No pod log is served: the driver gives up on it, closes it, and
		// then cleans up.
		for _, id := range ids {
			e.logComplete(t, id, 1)
		}
		e.noObjectsLeft(t)
		t.Logf("logs closed and objects gone after %s", time.Since(began).Round(time.Millisecond))
	})

	t.Run("a gang is one indexed Job and a headless Service", func(t *testing.T) {
		began := time.Now()
		job := e.submit(t, 2, 8, map[string]string{"kwok-duration": "2s"}, func(s *model.JobSpec) { s.Resources.GPU.Models = []string{"A100-80GB"} })
		var k *batchv1.Job
		e.eventually("the gang's Job", 20*time.Second, func() bool {
			jobs := e.jobsOf(job.ID)
			if len(jobs) == 1 {
				k = jobs[0]
			}
			return k != nil
		})
		// The Service exists before the Job.
		svcs, err := e.kc.Client().CoreV1().Services(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + job.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(svcs.Items) != 1 || svcs.Items[0].Spec.ClusterIP != corev1.ClusterIPNone || k.Spec.Template.Spec.Subdomain != svcs.Items[0].Name {
			t.Fatalf("services %+v; want one headless Service named as the pods' subdomain %q", svcs.Items, k.Spec.Template.Spec.Subdomain)
		}
		svc := svcs.Items[0].Name
		if k.Spec.CompletionMode == nil || *k.Spec.CompletionMode != batchv1.IndexedCompletion || *k.Spec.Completions != 2 || *k.Spec.Parallelism != 2 {
			t.Errorf("Job %s: completion mode %v, completions %d, parallelism %d; want Indexed, 2, 2", k.Name, k.Spec.CompletionMode, *k.Spec.Completions, *k.Spec.Parallelism)
		}
		j := e.waitJob(t, job.ID, 30*time.Second)
		if j.State != model.JobSucceeded || *j.ExitCode != 0 {
			t.Fatalf("gang ended %s (%s), want succeeded", j.State, j.Reason)
		}
		pods := e.podsOf(k.Name)
		if len(pods) != 2 || pods[0].Spec.NodeName == pods[1].Spec.NodeName || products[pods[0].Spec.NodeName] != a100Product || products[pods[1].Spec.NodeName] != a100Product {
			t.Errorf("gang pods ran on %v, want two different A100 nodes", nodeNames(pods))
		}
		e.noObjectsLeft(t)
		if !e.gone("Job", k.Name) {
			t.Errorf("Job %s was never deleted", k.Name)
		}
		if _, err := e.kc.Client().CoreV1().Services(e.ns).Get(e.ctx, svc, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Service %s: %v, want gone", svc, err)
		}
		t.Logf("gang succeeded and cleaned up after %s", time.Since(began).Round(time.Millisecond))
	})

	t.Run("a failing job ends failed with its exit code", func(t *testing.T) {
		job := e.submit(t, 1, 1, map[string]string{"kwok-exit-code": "3"}, nil)
		j := e.waitJob(t, job.ID, 30*time.Second)
		if j.State != model.JobFailed || j.ExitCode == nil || *j.ExitCode != 3 || j.Attempts != 1 {
			t.Fatalf("job ended %s (%s), exit %v, attempts %d; want failed, exit 3, one attempt", j.State, j.Reason, j.ExitCode, j.Attempts)
		}
		e.noObjectsLeft(t)
	})

	t.Run("cancel deletes the Job and its pods", func(t *testing.T) {
		job := e.submit(t, 1, 1, map[string]string{"kwok-duration": "1h"}, nil)
		e.eventually("the job running", 20*time.Second, func() bool {
			j, err := e.ctrl.Job(job.ID)
			return err == nil && j.State == model.JobRunning
		})
		jobs := e.jobsOf(job.ID)
		if len(jobs) != 1 {
			t.Fatalf("%d Kubernetes Jobs, want 1", len(jobs))
		}
		name := jobs[0].Name
		pods := e.podsOf(name)
		if len(pods) != 1 || pods[0].Status.Phase != corev1.PodRunning {
			t.Fatalf("pods of %s: %v, want one Running", name, pods)
		}
		if _, err := e.ctrl.Cancel(e.ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		j := e.waitJob(t, job.ID, 20*time.Second)
		if j.State != model.JobCancelled {
			t.Fatalf("job ended %s (%s), want cancelled", j.State, j.Reason)
		}
		// Deleted with propagation: the pod goes too (an orphaned pod would
		// run on).
		e.eventually("the Job and its pod deleted", 20*time.Second, func() bool {
			return e.gone("Job", name) && e.gone("Pod", pods[0].Name)
		})
		e.noObjectsLeft(t)
	})

	t.Run("a pool whose namespace is missing fails its jobs with the reason", func(t *testing.T) {
		// gpufleet does not create namespaces (its Role is namespaced).
		e.startPool(t, e.pool+"-nons", "it-missing")
		job := e.submit(t, 1, 1, nil, func(s *model.JobSpec) { s.NodeSelector = map[string]string{kubernetes.LabelPool: e.pool + "-nons"} })
		j := e.waitJob(t, job.ID, 30*time.Second)
		if j.State != model.JobFailed || !strings.Contains(j.Reason, `namespaces "it-missing" not found`) {
			t.Fatalf("job ended %s (%s), want failed because the namespace is missing", j.State, j.Reason)
		}
	})
}

// TestSpotNodeLoss deletes the node of a running job, as a cloud reclaims a
// spot VM: the attempt is lost, the job requeues and finishes on the
// other node.
func TestSpotNodeLoss(t *testing.T) {
	t.Parallel()
	began := time.Now()
	spot := kubetest.NodeSpec{GPUProduct: h100Product, CapacityType: "spot"}
	e := newKubeEnv(t, "spot", 16, nodeGroup{2, spot})
	// Every attempt runs until the same moment (KWOK reads an RFC 3339
	// time as "until then"): long enough for the first to be caught
	// running, short enough for the second to finish soon.
	until := time.Now().Add(10 * time.Second).UTC().Format(time.RFC3339)
	job := e.submit(t, 1, 1, map[string]string{"kwok-duration": until}, func(s *model.JobSpec) { s.Spot = model.SpotRequired })
	var first *corev1.Pod
	e.eventually("the first attempt's pod running", 20*time.Second, func() bool {
		jobs := e.jobsOf(job.ID)
		if len(jobs) == 0 {
			return false
		}
		pods := e.podsOf(jobs[0].Name)
		if len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning {
			first = pods[0]
		}
		return first != nil
	})
	e.kc.DeleteNode(e.ctx, first.Spec.NodeName)
	e.eventually("the job requeued", 20*time.Second, func() bool {
		j, err := e.ctrl.Job(job.ID)
		return err == nil && j.Attempts >= 2
	})
	// PodGC would fail and delete the orphan 40 to 80 s from now.
	e.kc.GCOrphanedPods(e.ctx, first.Spec.NodeName)

	j := e.waitJob(t, job.ID, 30*time.Second)
	if j.State != model.JobSucceeded || j.Attempts != 2 || j.Preemptions != 1 {
		t.Fatalf("job ended %s (%s) after %d attempts, %d preemptions; want succeeded on attempt 2 after 1", j.State, j.Reason, j.Attempts, j.Preemptions)
	}
	attempts, err := e.ctrl.Attempts(job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 2 || attempts[0].State != model.AttemptLost && attempts[0].State != model.AttemptPreempted || attempts[1].State != model.AttemptSucceeded {
		t.Fatalf("attempts %v, want lost or preempted, then succeeded", attemptStates(attempts))
	}
	t.Logf("attempt 1 ended %s: %s", attempts[0].State, attempts[0].Reason)
	// One Job per attempt, in whatever order they were seen (creation
	// times have whole seconds).
	jobs := e.jobsOf(job.ID)
	attemptsRun := map[string]*batchv1.Job{}
	for _, k := range jobs {
		attemptsRun[k.Labels[kubernetes.LabelAttempt]] = k
	}
	k2 := attemptsRun[model.AttemptID(job.ID, 2)]
	if len(jobs) != 2 || len(attemptsRun) != 2 || attemptsRun[model.AttemptID(job.ID, 1)] == nil || k2 == nil {
		t.Fatalf("Kubernetes Jobs %v, want one per attempt", jobNames(jobs))
	}
	second := e.podsOf(k2.Name)
	if len(second) != 1 || second[0].Spec.NodeName == first.Spec.NodeName || second[0].Spec.NodeName == "" {
		t.Errorf("attempt 2 ran on %v, want the other node than %s", nodeNames(second), first.Spec.NodeName)
	}
	e.noObjectsLeft(t)
	t.Logf("spot loss survived in %s", time.Since(began).Round(time.Millisecond))
}

func nodeNames(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Spec.NodeName
	}
	return out
}

func jobNames(jobs []*batchv1.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Name
	}
	return out
}

func attemptStates(as []*model.Attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = fmt.Sprintf("%d:%s(%s)", a.Number, a.State, a.Reason)
	}
	return out
}
