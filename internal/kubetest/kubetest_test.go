package kubetest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/gpufleet/gpufleet/internal/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// poolLabel keeps each test's pods on its own nodes of the shared cluster.
const poolLabel = "kubetest.gpufleet.dev/pool"

func TestSmoke(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := kubetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cs := c.Client()

	nodes := c.AddGPUNodes(ctx, 4, kubetest.NodeSpec{Labels: map[string]string{poolLabel: "smoke"}})
	t.Logf("control plane and 4 nodes ready after %s", time.Since(began).Round(time.Millisecond))
	// The kubeconfig works as a driver would use it.
	loaded, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	if err != nil {
		t.Fatalf("loading %s: %v", c.Kubeconfig, err)
	}
	if _, err := kubernetes.NewForConfigOrDie(loaded).CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{}); err != nil {
		t.Fatalf("getting node %s through the kubeconfig: %v", nodes[0], err)
	}
	ns := namespace(ctx, t, cs, "smoke")
	onNodes := map[string]bool{}
	for _, n := range nodes {
		onNodes[n] = true
	}

	t.Run("group", func(t *testing.T) {
		t.Run("succeeds after its duration", func(t *testing.T) {
			t.Parallel()
			created := time.Now()
			job := createJob(ctx, t, cs, ns, jobSpec{name: "two-seconds", gpus: 1, pool: "smoke", duration: "2s"})
			job = waitJobDone(ctx, t, cs, job)
			took := time.Since(created)
			if !jobCondition(job, batchv1.JobComplete) {
				t.Fatalf("job ended %v, want Complete", job.Status.Conditions)
			}
			if took < 2*time.Second || took > 10*time.Second {
				t.Errorf("job took %s, want 2s and a little", took)
			}
			pods := jobPods(ctx, t, cs, job)
			if len(pods) != 1 || pods[0].Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pods %v, want one Succeeded", phases(pods))
			}
			if code := exitCode(pods[0]); code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			if !onNodes[pods[0].Spec.NodeName] {
				t.Errorf("pod ran on %q, not one of %v", pods[0].Spec.NodeName, nodes)
			}
		})
		t.Run("fails with its exit code", func(t *testing.T) {
			t.Parallel()
			job := createJob(ctx, t, cs, ns, jobSpec{name: "exit-three", gpus: 1, pool: "smoke", duration: "1s", exitCode: "3"})
			job = waitJobDone(ctx, t, cs, job)
			if !jobCondition(job, batchv1.JobFailed) {
				t.Fatalf("job ended %v, want Failed", job.Status.Conditions)
			}
			pods := jobPods(ctx, t, cs, job)
			if len(pods) != 1 || pods[0].Status.Phase != corev1.PodFailed {
				t.Fatalf("pods %v, want one Failed", phases(pods))
			}
			if code := exitCode(pods[0]); code != 3 {
				t.Errorf("exit code %d, want 3", code)
			}
		})
		t.Run("indexed gang on distinct nodes", func(t *testing.T) {
			t.Parallel()
			job := createJob(ctx, t, cs, ns, jobSpec{name: "gang", gpus: 8, pool: "smoke", duration: "1s", completions: 4})
			job = waitJobDone(ctx, t, cs, job)
			if !jobCondition(job, batchv1.JobComplete) {
				t.Fatalf("job ended %v, want Complete", job.Status.Conditions)
			}
			pods := jobPods(ctx, t, cs, job)
			for i, p := range pods {
				if p.Status.Phase != corev1.PodSucceeded {
					t.Errorf("pod %s is %s, want Succeeded", p.Name, p.Status.Phase)
				}
				if !onNodes[p.Spec.NodeName] {
					t.Errorf("pod %s ran on %q, not one of %v", p.Name, p.Spec.NodeName, nodes)
				}
				// 8 GPUs each: two pods share a node only one after the
				// other (the Job controller may start the last pods after
				// the first have ended, on a busy machine).
				for _, q := range pods[:i] {
					if q.Spec.NodeName == p.Spec.NodeName && overlap(&p, &q) {
						t.Errorf("pods %s and %s ran on node %s at once", q.Name, p.Name, p.Spec.NodeName)
					}
				}
			}
			if len(pods) != 4 {
				t.Errorf("%d pods, want 4", len(pods))
			}
		})
		t.Run("node deleted mid-run", func(t *testing.T) {
			t.Parallel()
			// Its own node, so the gang above keeps all four.
			c := c.For(t)
			spot := c.AddGPUNodes(ctx, 1, kubetest.NodeSpec{CapacityType: "spot", Labels: map[string]string{poolLabel: "spot"}})[0]
			job := createJob(ctx, t, cs, ns, jobSpec{name: "spot-loss", gpus: 8, pool: "spot", duration: "1h", backoffLimit: 1})
			pod := waitPod(ctx, t, cs, job, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
			if pod.Spec.NodeName != spot {
				t.Fatalf("pod on %q, want %q", pod.Spec.NodeName, spot)
			}

			c.DeleteNode(ctx, spot)
			// What really happens first: nothing. KWOK lets go of the pod;
			// it stays Running, bound to a node that is gone, until PodGC
			// comes 40 to 80 s later.
			got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || got.Status.Phase != corev1.PodRunning || got.DeletionTimestamp != nil {
				t.Fatalf("right after the node's deletion: pod %v (err %v), want it still Running", podState(got), err)
			}

			// What PodGC then does, done now.
			if n := c.GCOrphanedPods(ctx, spot); n != 1 {
				t.Errorf("GCOrphanedPods deleted %d pods, want 1", n)
			}
			waitPodGone(ctx, t, cs, ns, pod.Name)
			// The Job counts a failure and, within backoffLimit and after
			// its ~10 s failure backoff, makes a replacement that no node
			// can take.
			job = waitJob(ctx, t, cs, job, func(j *batchv1.Job) bool { return j.Status.Failed == 1 })
			next := waitPod(ctx, t, cs, job, func(p *corev1.Pod) bool {
				return p.Name != pod.Name && unschedulable(p)
			})
			if next.Status.Phase != corev1.PodPending {
				t.Errorf("replacement pod is %s, want Pending", next.Status.Phase)
			}
		})
	})
	t.Logf("TestSmoke took %s", time.Since(began).Round(time.Millisecond))
}

// BenchmarkAddGPUNodes adds 1,000 nodes an iteration and waits until all
// are Ready, on a control plane of its own.
func BenchmarkAddGPUNodes(b *testing.B) {
	c := kubetest.Start(b, kubetest.Options{})
	ctx := context.Background()
	for b.Loop() {
		c.AddGPUNodes(ctx, 1000, kubetest.NodeSpec{})
	}
}

// TestPodGCAfterNodeDeletion checks the timing the package documents for
// kube-controller-manager's PodGC. It takes 40 to 80 s, so it runs only
// with GPUFLEET_KUBE_PODGC=1.
func TestPodGCAfterNodeDeletion(t *testing.T) {
	if os.Getenv("GPUFLEET_KUBE_PODGC") != "1" {
		t.Skip("takes 40 to 80 s; set GPUFLEET_KUBE_PODGC=1 to run it")
	}
	t.Parallel()
	c := kubetest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Client()
	node := c.AddGPUNodes(ctx, 1, kubetest.NodeSpec{CapacityType: "spot", Labels: map[string]string{poolLabel: "podgc"}})[0]
	ns := namespace(ctx, t, cs, "podgc")
	job := createJob(ctx, t, cs, ns, jobSpec{name: "orphan", gpus: 1, pool: "podgc", duration: "1h"})
	pod := waitPod(ctx, t, cs, job, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	deleted := time.Now()
	c.DeleteNode(ctx, node)
	failed := waitPod(ctx, t, cs, job, func(p *corev1.Pod) bool {
		return p.Name == pod.Name && p.Status.Phase == corev1.PodFailed
	})
	took := time.Since(deleted)
	if cond := podCondition(failed, corev1.DisruptionTarget); cond == nil || cond.Reason != "DeletionByPodGC" {
		t.Errorf("failed pod's DisruptionTarget condition %+v, want reason DeletionByPodGC", cond)
	}
	waitPodGone(ctx, t, cs, ns, pod.Name)
	t.Logf("PodGC failed the orphan %s after the node's deletion, and deleted it %s after", took.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
	if took < 30*time.Second || took > 90*time.Second {
		t.Errorf("PodGC took %s, want 40 to 80 s", took)
	}
}

type jobSpec struct {
	name         string
	gpus         int64
	pool         string
	duration     string
	exitCode     string
	completions  int32 // > 0: an Indexed Job with that many completions, all in parallel
	backoffLimit int32
}

func createJob(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, s jobSpec) *batchv1.Job {
	t.Helper()
	ann := map[string]string{kubetest.AnnotationDuration: s.duration}
	if s.exitCode != "" {
		ann[kubetest.AnnotationExitCode] = s.exitCode
	}
	gpus := *resource.NewQuantity(s.gpus, resource.DecimalSI)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: &s.backoffLimit,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: ann},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector:  map[string]string{poolLabel: s.pool},
					Containers: []corev1.Container{{
						Name:  "main",
						Image: "registry.invalid/gpufleet/train:1", // never pulled: KWOK runs nothing
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{kubetest.ResourceGPU: gpus},
							Limits:   corev1.ResourceList{kubetest.ResourceGPU: gpus},
						},
					}},
				},
			},
		},
	}
	if s.completions > 0 {
		mode := batchv1.IndexedCompletion
		job.Spec.CompletionMode = &mode
		job.Spec.Completions = &s.completions
		job.Spec.Parallelism = &s.completions
	}
	job, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating job %s: %v", s.name, err)
	}
	return job
}

func namespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// until watches the objects that lw lists, of objType's type, until cond
// holds for one of them, and returns it.
func until[T runtime.Object](ctx context.Context, t *testing.T, what string, lw cache.ListerWatcher, objType T, cond func(T) bool) T {
	t.Helper()
	ev, err := watchtools.UntilWithSync(ctx, lw, objType, nil, func(ev watch.Event) (bool, error) {
		obj, ok := ev.Object.(T)
		return ok && ev.Type != watch.Deleted && cond(obj), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return ev.Object.(T)
}

func jobLW(cs kubernetes.Interface, job *batchv1.Job) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(cs.BatchV1().RESTClient(), "jobs", job.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", job.Name).String()
	})
}

func podLW(cs kubernetes.Interface, ns, selector, fieldSelector string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, func(o *metav1.ListOptions) {
		o.LabelSelector, o.FieldSelector = selector, fieldSelector
	})
}

func waitJob(ctx context.Context, t *testing.T, cs kubernetes.Interface, job *batchv1.Job, cond func(*batchv1.Job) bool) *batchv1.Job {
	t.Helper()
	return until(ctx, t, "job "+job.Name, jobLW(cs, job), &batchv1.Job{}, cond)
}

func waitJobDone(ctx context.Context, t *testing.T, cs kubernetes.Interface, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	return waitJob(ctx, t, cs, job, func(j *batchv1.Job) bool {
		return jobCondition(j, batchv1.JobComplete) || jobCondition(j, batchv1.JobFailed)
	})
}

func waitPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, job *batchv1.Job, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	return until(ctx, t, "a pod of job "+job.Name, podLW(cs, job.Namespace, "batch.kubernetes.io/job-name="+job.Name, ""), &corev1.Pod{}, cond)
}

func waitPodGone(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	lw := podLW(cs, ns, "", fields.OneTermEqualSelector("metadata.name", name).String())
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, func(store cache.Store) (bool, error) {
		return len(store.List()) == 0, nil
	}, func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
	if err != nil {
		t.Fatalf("waiting for pod %s to go: %v", name, err)
	}
}

func jobPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		t.Fatalf("listing pods of %s: %v", job.Name, err)
	}
	return pods.Items
}

func jobCondition(job *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func podCondition(pod *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == typ {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func unschedulable(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodScheduled)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

func exitCode(pod corev1.Pod) int32 {
	if len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		return -1
	}
	return pod.Status.ContainerStatuses[0].State.Terminated.ExitCode
}

func phases(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name + ":" + string(p.Status.Phase)
	}
	return out
}

func podState(p *corev1.Pod) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%s phase %s on %q deleting %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil)
}

// overlap reports whether two ended pods ran at the same time (to the
// second the API records).
func overlap(p, q *corev1.Pod) bool {
	span := func(p *corev1.Pod) (start, end time.Time) {
		if p.Status.StartTime != nil {
			start = p.Status.StartTime.Time
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated != nil {
				end = c.State.Terminated.FinishedAt.Time
			}
		}
		return start, end
	}
	ps, pe := span(p)
	qs, qe := span(q)
	return ps.Before(qe) && qs.Before(pe)
}
