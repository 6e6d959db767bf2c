package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/kubetest"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// BenchmarkKube5000 is issue 7's performance target: on a real control
// plane with 1,000 KWOK nodes × 8 GPUs, 5,000 one-GPU jobs of 1 s each run
// to completion twice through gpufleet (real controller, SQLite store,
// Cluster.Run) and twice as the same Jobs created directly with client-go
// (the baseline), order alternated, each run in its own namespace. It
// reports the wall time from the first submission to the last success of
// each, and gpufleet's ratio over the baseline (target < 1.10). It needs
// the binaries of tools/kube/build.sh and takes minutes, so it is a
// benchmark (never part of go test) that runs once whatever -benchtime:
//
//	GPUFLEET_KUBE_BIN=$(tools/kube/build.sh) go test ./internal/provider/kubernetes \
//	    -run '^$' -bench Kube5000 -benchtime 1x -timeout 30m
//
// GPUFLEET_KUBE_BENCH_JOBS and GPUFLEET_KUBE_BENCH_PAIRS change the number of
// jobs (default 5,000) and of run pairs (default 2), for machines too busy to
// run the full size.
func BenchmarkKube5000(b *testing.B) {
	const nodes = 1000
	jobs, pairs := benchEnv("GPUFLEET_KUBE_BENCH_JOBS", 5000), benchEnv("GPUFLEET_KUBE_BENCH_PAIRS", 2)
	kc := kubetest.Start(b, kubetest.Options{})
	ctx := b.Context()
	began := time.Now()
	kc.AddGPUNodes(ctx, nodes, kubetest.NodeSpec{})
	b.Logf("%d nodes ready in %v", nodes, time.Since(began).Round(time.Millisecond))
	b.ResetTimer()

	var base, fleet []benchRun
	for i := range pairs {
		runBase := func() {
			r := benchBaseline(b, kc, fmt.Sprintf("base-%d", i), jobs)
			base = append(base, r)
			b.Logf("baseline %d done", i)
		}
		runFleet := func() {
			r := benchGPUFleet(b, kc, fmt.Sprintf("fleet-%d", i), jobs)
			fleet = append(fleet, r)
			b.Logf("gpufleet %d done", i)
		}
		if i%2 == 0 {
			runBase()
			runFleet()
		} else {
			runFleet()
			runBase()
		}
	}
	b.StopTimer()
	sum := func(rs []benchRun) (d time.Duration) {
		for _, r := range rs {
			d += r.total
		}
		return d
	}
	ratio := sum(fleet).Seconds() / sum(base).Seconds()
	b.Logf("gpufleet/baseline wall time: %.3f (target < 1.10)", ratio)
	b.ReportMetric(sum(base).Seconds()/float64(pairs), "baseline-s")
	b.ReportMetric(sum(fleet).Seconds()/float64(pairs), "gpufleet-s")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(0, "ns/op")
}

func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchRun is one run's figures.
type benchRun struct {
	jobs     int
	total    time.Duration // first submission → last success
	submit   time.Duration // first → last submission accepted
	j50, j99 time.Duration // submission start → Job created
	c50, c99 time.Duration // submission start → pod created
	p50, p99 time.Duration // submission start → pod Running
}

func (r benchRun) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%d jobs in %v (%.0f jobs/s), submitted in %v, Jobs created p50 %v p99 %v, pods created p50 %v p99 %v, Running p50 %v p99 %v",
		r.jobs, ms(r.total), float64(r.jobs)/r.total.Seconds(), ms(r.submit), ms(r.j50), ms(r.j99), ms(r.c50), ms(r.c99), ms(r.p50), ms(r.p99))
}

// podWatch records when each pod of a namespace was first seen Running,
// and counts the pods that exist.
type podWatch struct {
	mu      sync.Mutex
	jobs    map[string]time.Time // Jobs, first seen
	created map[string]time.Time
	running map[string]time.Time
	live    atomic.Int64
}

func watchPods(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string) *podWatch {
	w := &podWatch{jobs: map[string]time.Time{}, created: map[string]time.Time{}, running: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.created[p.Name]; !ok {
			w.created[p.Name] = now
		}
		if _, ok := w.running[p.Name]; !ok && p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			w.running[p.Name] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.live.Add(1); seen(obj) },
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(any) { w.live.Add(-1) },
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.Batch().V1().Jobs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if j, ok := obj.(*batchv1.Job); ok {
			w.mu.Lock()
			w.jobs[j.Name] = time.Now()
			w.mu.Unlock()
		}
	}}); err != nil {
		b.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

// percentiles of the times to Running, from start.
func (w *podWatch) percentiles(start time.Time) (p50, p99 time.Duration) {
	return w.spread(w.running, start)
}

// spread is the median and 99th percentile of times since start.
func (w *podWatch) spread(times map[string]time.Time, start time.Time) (p50, p99 time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []time.Duration
	for _, t := range times {
		ds = append(ds, t.Sub(start))
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100]
}

// submitAll calls submit for 0…n-1, 32 at a time (the driver's default
// workers); a goroutine whose call fails reports it and stops.
func submitAll(b *testing.B, n int, submit func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := submit(i); err != nil {
					b.Errorf("submitting job %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchNamespace creates a run's namespace and returns the run's own
// client (the harness's QPS 1000).
func benchNamespace(ctx context.Context, b *testing.B, kc *kubetest.Cluster, ns string) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(kc.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating namespace %s: %v", ns, err)
	}
	return cs
}

// benchCleanup deletes a run's Jobs and waits (at most 15 minutes) for
// their pods to go, so that the next run starts on a quiet control plane;
// a run that cannot be cleaned up ends the benchmark, as the next run's
// figures would be wrong.
func benchCleanup(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string, w *podWatch) {
	bg := metav1.DeletePropagationBackground
	began := time.Now()
	for try := 1; ; try++ {
		// On a busy server the API server may time out deleting 5,000
		// Jobs after deleting many: ask again for the rest.
		err := cs.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
		if err == nil {
			break
		}
		b.Logf("deleting the Jobs of %s (try %d): %v", ns, try, err)
		if try == 10 {
			b.Fatalf("%s: the Jobs could not be deleted", ns)
		}
	}
	for w.live.Load() > 0 && time.Since(began) < 15*time.Minute {
		time.Sleep(time.Second)
	}
	if n := w.live.Load(); n > 0 {
		b.Fatalf("%s: %d pods left after %v", ns, n, time.Since(began).Round(time.Second))
	}
	b.Logf("%s: cleaned up in %v", ns, time.Since(began).Round(time.Millisecond))
}

// benchSpec is the replica the controller hands a one-GPU job, as far as
// the Job built from it goes.
func benchSpec(i int) agentapi.ReplicaSpec {
	s := spec(fmt.Sprintf("b-%05d", i), 0, 1, 0)
	s.Tags = map[string]string{"kwok-duration": "1s"}
	return s
}

// benchBaseline creates n Jobs like gpufleet's, 32 at a time (the driver's
// default workers) with the harness's client (QPS 1000), and waits until
// every one is Complete.
func benchBaseline(b *testing.B, kc *kubetest.Cluster, ns string, n int) benchRun {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	cs := benchNamespace(ctx, b, kc, ns)
	settings := withDefaults(model.KubernetesPoolSettings{Namespace: ns})
	target := &nodeTarget{id: "bench", models: []string{"NVIDIA-H100-80GB-HBM3"}, capacities: []string{"on-demand"}, region: "us-east-1", zone: "us-east-1a"}
	built := make([]*batchv1.Job, n)
	for i := range built {
		plan := jobPlan{pool: "bench", settings: settings, node: target, specs: []agentapi.ReplicaSpec{benchSpec(i)}}
		built[i], _ = plan.build()
	}

	pods := watchPods(ctx, b, cs, ns)
	var complete atomic.Int64
	done := make(chan struct{})
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	counted := sync.Map{}
	check := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				if _, dup := counted.LoadOrStore(j.Name, true); !dup && complete.Add(1) == int64(n) {
					close(done)
				}
			}
		}
	}
	if _, err := f.Batch().V1().Jobs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: check, UpdateFunc: func(_, obj any) { check(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())

	m := startMeter(ctx, b, cs, ns)
	start := m.start
	submitAll(b, n, func(i int) error {
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, built[i], metav1.CreateOptions{})
		return err
	})
	submitted := time.Since(start)
	select {
	case <-done:
	case <-time.After(15 * time.Minute):
		b.Fatalf("baseline: %d of %d Jobs complete after 15 minutes", complete.Load(), n)
	}
	r := m.finish(ctx, b, pods, n, submitted)
	benchCleanup(ctx, b, cs, ns, pods)
	return r
}

// benchGPUFleet submits n one-GPU jobs to a fresh controller (SQLite store)
// whose only pool is a Cluster on namespace ns, 32 submitters at a time,
// and waits until the controller records every job succeeded.
func benchGPUFleet(b *testing.B, kc *kubetest.Cluster, ns string, n int) benchRun {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	cs := benchNamespace(ctx, b, kc, ns)
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	logs, err := logstore.New(filepath.Join(dir, "logs"))
	if err != nil {
		b.Fatal(err)
	}
	ctrl, err := controller.New(ctx, controller.Config{Store: st, Logs: logs, CheckpointDir: filepath.Join(dir, "ckpt"),
		Fatal: func(err error) { b.Errorf("store failed: %v", err) }})
	if err != nil {
		b.Fatal(err)
	}
	defer ctrl.Close()
	var loops sync.WaitGroup
	defer loops.Wait()
	defer cancel()
	loops.Go(func() { _ = ctrl.Run(ctx) })
	cl, err := New(Options{Pool: "bench", Settings: model.KubernetesPoolSettings{Namespace: ns, PricePerGPUHour: 1}, Client: cs})
	if err != nil {
		b.Fatal(err)
	}
	if err := cl.Start(ctx); err != nil {
		b.Fatal(err)
	}
	loops.Go(func() { _ = cl.Run(ctx, ctrl) })
	ready := time.Now()
	for !benchNodeReady(ctrl) {
		if time.Since(ready) > time.Minute {
			b.Fatal("the virtual nodes did not register 8,000 GPUs")
		}
		time.Sleep(50 * time.Millisecond)
	}
	podCtx, podCancel := context.WithCancel(b.Context())
	defer podCancel()
	pods := watchPods(podCtx, b, cs, ns)

	sub := func() model.JobSpec {
		s := model.JobSpec{Resources: model.Resources{GPUs: 1, GPU: model.GPURequest{Models: []string{"H100"}}},
			Run: model.RunSpec{Command: []string{"python", "train.py"}, Image: "ghcr.io/acme/train:1"}}
		s.Default()
		return s
	}
	m := startMeter(ctx, b, cs, ns)
	start := m.start
	submitAll(b, n, func(i int) error {
		_, _, err := ctrl.Submit(ctx, controller.Submission{Project: "default", Name: "b-" + strconv.Itoa(i),
			Tags: map[string]string{"kwok-duration": "1s"}, Spec: sub()})
		return err
	})
	submitted := time.Since(start)
	deadline := time.Now().Add(15 * time.Minute)
	last := time.Now()
	for {
		counts := ctrl.JobCounts()
		if counts[model.JobSucceeded] == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("gpufleet: after 15 minutes: %v", counts)
		}
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			b.Logf("%v: %v, pods %d", time.Since(start).Round(time.Second), counts, pods.live.Load())
		}
		select {
		case <-ctrl.Changed():
		case <-time.After(time.Second):
		}
		time.Sleep(20 * time.Millisecond) // a change comes with many: look at most 50 times a second
	}
	r := m.finish(b.Context(), b, pods, n, submitted)
	cancel()
	loops.Wait()
	benchCleanup(b.Context(), b, cs, ns, pods)
	return r
}

// meter is what a run measures from its start: the API requests of all
// clients together (the control plane's own included), the CPU of every
// process, and (GPUFLEET_KUBE_BENCH_PROFILE) the API server's profile.
type meter struct {
	cs     kubernetes.Interface
	ns     string
	start  time.Time
	before map[string]float64
	cpu    map[string]time.Duration
}

func startMeter(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string) *meter {
	before, _ := apiRequests(ctx, cs)
	m := &meter{cs: cs, ns: ns, before: before, cpu: cpuTimes()}
	profileAPIServer(ctx, b, cs, os.Getenv("GPUFLEET_KUBE_BENCH_PROFILE"), ns, 30)
	m.start = time.Now()
	return m
}

// finish ends the run now and logs its figures.
func (m *meter) finish(ctx context.Context, b *testing.B, pods *podWatch, n int, submitted time.Duration) benchRun {
	r := benchRun{jobs: n, total: time.Since(m.start), submit: submitted}
	r.p50, r.p99 = pods.percentiles(m.start)
	r.c50, r.c99 = pods.spread(pods.created, m.start)
	r.j50, r.j99 = pods.spread(pods.jobs, m.start)
	b.Logf("%s: %v", m.ns, r)
	if after, err := apiRequests(ctx, m.cs); err != nil || m.before == nil {
		b.Logf("%s: API requests unknown: %v", m.ns, err)
	} else {
		b.Logf("%s: %s", m.ns, requestDelta(m.before, after, 50))
	}
	b.Logf("%s: %s", m.ns, cpuDelta(m.cpu, cpuTimes()))
	return r
}

func benchNodeReady(ctrl *controller.Controller) bool {
	gpus := 0
	for _, n := range ctrl.Nodes() {
		if n.Pool == "bench" && n.State == model.NodeReady {
			gpus += len(n.GPUs)
		}
	}
	return gpus == 8000
}
