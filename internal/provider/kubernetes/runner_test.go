package kubernetes

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

var bg = context.Background()

// harness is a Cluster on a fake clientset, its runner and a fake control
// plane.
type harness struct {
	t    *testing.T
	c    *Cluster
	cs   *fake.Clientset
	cp   *fakeCP
	node string // the first virtual node's id
}

func newHarness(t *testing.T, s model.KubernetesPoolSettings, objs ...runtime.Object) *harness {
	t.Helper()
	c, cs := startCluster(t, s, objs...)
	h := &harness{t: t, c: c, cs: cs, cp: newFakeCP()}
	if ms, _ := c.Machines(bg); len(ms) > 0 {
		h.node = ms[0].ID
	}
	return h
}

func (h *harness) run() { run(h.t, h.c, h.cp) }

// job waits for Job name to exist and returns it.
func (h *harness) job(name string) *batchv1.Job {
	h.t.Helper()
	var j *batchv1.Job
	eventually(h.t, "Job "+name, func() bool {
		var err error
		j, err = h.cs.BatchV1().Jobs(DefaultNamespace).Get(bg, name, metav1.GetOptions{})
		return err == nil
	})
	return j
}

func (h *harness) jobGone(name string) bool {
	_, err := h.cs.BatchV1().Jobs(DefaultNamespace).Get(bg, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func (h *harness) createPod(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.cs.CoreV1().Pods(p.Namespace).Create(bg, p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) updatePod(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.cs.CoreV1().Pods(p.Namespace).Update(bg, p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// waitPhase waits for the control plane to hold phase for replica id.
func (h *harness) waitPhase(id string, phase agentapi.Phase) agentapi.ReplicaStatus {
	h.t.Helper()
	eventually(h.t, "replica "+id+" "+string(phase), func() bool { return h.cp.status(id).Phase == phase })
	return h.cp.status(id)
}

// actions returns the clientset's actions of verb on resource.
func (h *harness) actions(verb, resource string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range h.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			out = append(out, a)
		}
	}
	return out
}

func TestRunsAJobToCompletion(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{PricePerGPUHour: 2.5}, h100("n1").obj())
	h.run()
	eventually(t, "registration", func() bool { return len(h.cp.registrations()) > 0 })
	reg := h.cp.registrations()[0]
	if reg.NodeID != h.node || len(reg.GPUs) != 8 || reg.PricePerHour != 20 || reg.Pool != "k8s" || reg.Provider != "k8s" ||
		reg.CapacityType != model.OnDemand || reg.Region != "us-east-1" || reg.Zone != "us-east-1a" || reg.InstanceType != "p5.48xlarge" ||
		reg.Labels[LabelPool] != "k8s" || reg.GPUs[0].Model != "H100" {
		t.Errorf("registration = %+v", reg)
	}

	s := spec("j-1", 0, 1, 3)
	h.cp.mu.Lock()
	h.cp.logs[s.ID] = []byte("fake") // shipped before a restart: the rest follows
	h.cp.mu.Unlock()
	h.cp.want(h.node, s)
	job := h.job("gf-j-1-a1-r0")
	if job.Labels[LabelNode] != h.node {
		t.Errorf("job labels %v", job.Labels)
	}
	pod := podOf(job, 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	h.waitPhase(s.ID, agentapi.PhaseRunning)
	h.updatePod(exited(pod.DeepCopy(), 0))
	pod.Status.Phase = corev1.PodSucceeded
	h.updatePod(exited(pod, 0))
	st := h.waitPhase(s.ID, agentapi.PhaseExited)
	if st.ExitCode == nil || *st.ExitCode != 0 || st.Reason != "" || st.EndedAt == nil {
		t.Errorf("status = %+v", st)
	}
	eventually(t, "the whole log, closed", func() bool { data, eof := h.cp.log(s.ID); return data == "fake logs" && eof })
	eventually(t, "the Job deleted once its end was recorded", func() bool { return h.jobGone(job.Name) })
	if n := len(h.actions("create", "jobs")); n != 1 {
		t.Errorf("%d Job creates, want 1", n)
	}
}

func TestGangRunsAsOneIndexedJob(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj(), h100("n2").obj())
	h.run()
	specs := []agentapi.ReplicaSpec{spec("j-g", 0, 2, 0, 1, 2, 3, 4, 5, 6, 7), spec("j-g", 1, 2, 8, 9, 10, 11, 12, 13, 14, 15)}
	h.cp.want(h.node, specs...)
	job := h.job("gf-j-g-a1-r0")
	if *job.Spec.Completions != 2 || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("job spec %+v", job.Spec)
	}
	eventually(t, "the gang's Service", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-g-a1", metav1.GetOptions{})
		return err == nil
	})
	h.createPod(podOf(job, 0, "n1", corev1.PodRunning))
	h.createPod(podOf(job, 1, "n2", corev1.PodRunning))
	h.waitPhase(specs[0].ID, agentapi.PhaseRunning)
	h.waitPhase(specs[1].ID, agentapi.PhaseRunning)
	// Rank 1 fails: the Job controller fails the Job and kills rank 0.
	p1 := exited(podOf(job, 1, "n2", corev1.PodFailed), 7)
	h.updatePod(p1)
	if st := h.waitPhase(specs[1].ID, agentapi.PhaseExited); st.ExitCode == nil || *st.ExitCode != 7 {
		t.Errorf("rank 1 = %+v", st)
	}
	h.cp.stop(h.node, specs[0].AttemptID) // the controller stops the rest of the gang
	eventually(t, "the Job deleted", func() bool { return len(h.actions("delete", "jobs")) > 0 })
	if err := h.cs.CoreV1().Pods(DefaultNamespace).Delete(bg, job.Name+"-0-abcde", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := h.waitPhase(specs[0].ID, agentapi.PhaseExited); st.Reason != agentapi.ReasonStopped {
		t.Errorf("rank 0 = %+v", st)
	}
	eventually(t, "the Service deleted with its Job", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-g-a1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestStopDeletesTheJobWithGrace(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	h.run()
	s := spec("j-stop", 0, 1, 0)
	h.cp.want(h.node, s)
	job := h.job("gf-j-stop-a1-r0")
	pod := podOf(job, 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	h.waitPhase(s.ID, agentapi.PhaseRunning)

	h.cp.stop(h.node, s.AttemptID)
	eventually(t, "the Job's delete", func() bool { return len(h.actions("delete", "jobs")) > 0 })
	del := h.actions("delete", "jobs")[0].(k8stesting.DeleteActionImpl)
	if del.Name != job.Name || del.DeleteOptions.GracePeriodSeconds == nil || *del.DeleteOptions.GracePeriodSeconds != 45 ||
		del.DeleteOptions.PropagationPolicy == nil || *del.DeleteOptions.PropagationPolicy != metav1.DeletePropagationBackground {
		t.Errorf("delete = %s %+v", del.Name, del.DeleteOptions)
	}
	time.Sleep(100 * time.Millisecond) // the pod still runs: nothing to report yet
	if st := h.cp.status(s.ID); st.Phase != agentapi.PhaseRunning {
		t.Errorf("status while the pod terminates = %+v", st)
	}
	// The garbage collector takes the pod.
	if err := h.cs.CoreV1().Pods(DefaultNamespace).Delete(bg, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := h.waitPhase(s.ID, agentapi.PhaseExited); st.Reason != agentapi.ReasonStopped {
		t.Errorf("status = %+v", st)
	}
}

func TestNodeDeletedLosesTheReplica(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("spot-1").capacity("spot").obj())
	h.run()
	s := spec("j-spot", 0, 1, 0)
	h.cp.want(h.node, s)
	job := h.job("gf-j-spot-a1-r0")
	h.createPod(podOf(job, 0, "spot-1", corev1.PodRunning))
	h.waitPhase(s.ID, agentapi.PhaseRunning)

	if err := h.cs.CoreV1().Nodes().Delete(bg, "spot-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st := h.waitPhase(s.ID, agentapi.PhaseLost)
	if st.Reason != "node spot-1 deleted (spot loss)" {
		t.Errorf("reason = %q", st.Reason)
	}
	eventually(t, "the lost replica's Job deleted", func() bool { return h.jobGone(job.Name) })
	eventually(t, "a registration without GPUs", func() bool {
		regs := h.cp.registrations()
		return len(regs[len(regs)-1].GPUs) == 0
	})
}

func TestAdoptsJobsAfterRestart(t *testing.T) {
	cs := fake.NewClientset(h100("n1").obj())
	cp := newFakeCP()
	start := func() (*Cluster, context.CancelFunc, chan error) {
		// No Job controller finishes the fake's Jobs: keep none.
		c, err := New(Options{Pool: "k8s", Settings: model.KubernetesPoolSettings{KeepFinished: new(model.Duration(0))}, Client: cs,
			SyncWait: 50 * time.Millisecond, RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx, cp) }()
		return c, cancel, done
	}
	c, cancel, done := start()
	ms, _ := c.Machines(bg)
	node := ms[0].ID
	s := spec("j-adopt", 0, 1, 0)
	cp.want(node, s)
	h := &harness{t: t, cs: cs, cp: cp}
	job := h.job("gf-j-adopt-a1-r0")
	pod := podOf(job, 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	h.waitPhase(s.ID, agentapi.PhaseRunning)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The pod finishes while gpufleet is down; a new runner adopts the Job.
	pod.Status.Phase = corev1.PodSucceeded
	h.updatePod(exited(pod, 0))
	_, cancel, done = start()
	defer func() { cancel(); <-done }()
	if st := h.waitPhase(s.ID, agentapi.PhaseExited); st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("status = %+v", st)
	}
	if n := len(h.actions("create", "jobs")); n != 1 {
		t.Errorf("%d Job creates across the restart, want 1", n)
	}
	eventually(t, "the adopted Job deleted once recorded", func() bool { return h.jobGone(job.Name) })
}

func TestDeletesOrphans(t *testing.T) {
	c, cs := startCluster(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	ms, _ := c.Machines(bg)
	grp := c.groups()[0]
	// Jobs a previous run left for attempts the server no longer wants:
	// one finished, one still running.
	h := &harness{t: t, c: c, cs: cs, cp: newFakeCP(), node: ms[0].ID}
	var pods []*corev1.Pod
	for _, tc := range []struct {
		job   string
		phase corev1.PodPhase
	}{{"j-done", corev1.PodSucceeded}, {"j-running", corev1.PodRunning}} {
		plan := jobPlan{pool: "k8s", settings: c.opts.Settings, node: targetOf(grp), specs: []agentapi.ReplicaSpec{spec(tc.job, 0, 1, 0)}}
		job, _ := plan.build()
		if _, err := cs.BatchV1().Jobs(DefaultNamespace).Create(bg, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := podOf(job, 0, "n1", tc.phase)
		if tc.phase == corev1.PodSucceeded {
			exited(p, 0)
		}
		h.createPod(p)
		pods = append(pods, p)
	}
	eventually(t, "the cache", func() bool {
		return len(c.jobsOf(h.node)) == 2 && len(c.podsOf(model.ReplicaID("j-running-a1", 0))) == 1
	})
	h.run()
	eventually(t, "the finished orphan deleted", func() bool { return h.jobGone("gf-j-done-a1-r0") })
	eventually(t, "the running orphan stopped", func() bool { return h.jobGone("gf-j-running-a1-r0") })
	if err := cs.CoreV1().Pods(DefaultNamespace).Delete(bg, pods[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPhase(model.ReplicaID("j-running-a1", 0), agentapi.PhaseExited)
}

func TestReRegistersWhenGPUsChange(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{PricePerGPUHour: 1}, h100("n1").obj())
	h.run()
	eventually(t, "registration", func() bool { return len(h.cp.registrations()) > 0 })
	if _, err := h.cs.CoreV1().Nodes().Create(bg, h100("n2").obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a registration with 16 GPUs", func() bool {
		regs := h.cp.registrations()
		last := regs[len(regs)-1]
		return len(last.GPUs) == 16 && last.PricePerHour == 16 && last.NodeID == h.node
	})
	// Another GPU model is another virtual node.
	if _, err := h.cs.CoreV1().Nodes().Create(bg, node("l4").gpu("NVIDIA-L4").gpus(1).obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the L4 virtual node", func() bool {
		for _, r := range h.cp.registrations() {
			if r.NodeID != h.node && len(r.GPUs) == 1 && r.GPUs[0].Model == "L4" {
				return true
			}
		}
		return false
	})
}

func TestCreateRefusedFailsTheReplica(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	h.cs.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "x", nil)
	})
	h.run()
	s := spec("j-bad", 0, 1, 0)
	noImage := spec("j-noimage", 0, 1, 1)
	noImage.Image = ""
	h.cp.want(h.node, s, noImage)
	if st := h.waitPhase(s.ID, agentapi.PhaseExited); !strings.HasPrefix(st.Reason, "creating Job gf-j-bad-a1-r0") || st.ExitCode != nil {
		t.Errorf("status = %+v", st)
	}
	if st := h.waitPhase(noImage.ID, agentapi.PhaseExited); !strings.HasPrefix(st.Reason, "no container image") {
		t.Errorf("status = %+v", st)
	}
	eventually(t, "EOF of a replica that never ran", func() bool { _, eof := h.cp.log(noImage.ID); return eof })
}

func TestTransientCreateErrorsAreRetried(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	fails := 2
	h.cs.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	h.run()
	s := spec("j-retry", 0, 1, 0)
	h.cp.want(h.node, s)
	h.job("gf-j-retry-a1-r0")
	if st := h.cp.status(s.ID); st.Phase != "" {
		t.Errorf("status = %+v", st)
	}
}

// runWithoutLogs runs the harness with every pod log read failing (as
// behind a node without a kubelet), counting the reads, and starts job's
// replica: it returns the spec and its Running pod.
func (h *harness) runWithoutLogs(job string, reads *atomic.Int32) (agentapi.ReplicaSpec, *corev1.Pod) {
	h.t.Helper()
	h.cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "log" {
			reads.Add(1)
			return true, nil, errors.New("dial tcp 10.0.0.7:10250: connect: connection refused")
		}
		return false, nil, nil
	})
	h.run()
	s := spec(job, 0, 1, 0)
	h.cp.want(h.node, s)
	pod := podOf(h.job(jobName(s.AttemptID, 0)), 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	h.waitPhase(s.ID, agentapi.PhaseRunning)
	return s, pod
}

func TestLogErrorsDoNotHoldUpStatus(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	var reads atomic.Int32
	s, pod := h.runWithoutLogs("j-nolog", &reads)
	pod.Status.Phase = corev1.PodFailed
	h.updatePod(exited(pod, 2))
	if st := h.waitPhase(s.ID, agentapi.PhaseExited); *st.ExitCode != 2 {
		t.Errorf("status = %+v", st)
	}
	eventually(t, "the log given up on and closed", func() bool { _, eof := h.cp.log(s.ID); return eof })
	eventually(t, "the Job deleted", func() bool { return h.jobGone(jobName(s.AttemptID, 0)) })
}

func TestLogFollowFailureWaitsForTheEnd(t *testing.T) {
	// A follow that fails while the pod runs is tried again when the pod
	// ends, not after the longest back-off (an hour here) nor on every
	// short one.
	c, cs := startClusterWith(t, model.KubernetesPoolSettings{}, func(o *Options) { o.MaxRetryBackoff = time.Hour }, h100("n1").obj())
	ms, _ := c.Machines(bg)
	h := &harness{t: t, c: c, cs: cs, cp: newFakeCP(), node: ms[0].ID}
	var reads atomic.Int32
	s, pod := h.runWithoutLogs("j-follow", &reads)
	eventually(t, "a follow tried", func() bool { return reads.Load() >= 1 })
	time.Sleep(100 * time.Millisecond) // twenty short back-offs
	if n := reads.Load(); n != 1 {
		t.Errorf("%d log reads while the pod runs, want 1", n)
	}
	pod.Status.Phase = corev1.PodSucceeded
	h.updatePod(exited(pod, 0))
	eventually(t, "the log given up on and closed", func() bool { _, eof := h.cp.log(s.ID); return eof })
	if n := reads.Load(); n != logTries {
		t.Errorf("%d log reads in all, want %d", n, logTries)
	}
}

// TestServiceReplicaIsReachedThroughItsService: a service's replica runs
// with a ClusterIP Service on its port, made before its Job; its status
// names the Service as its endpoint (which the server's proxy dials); the
// Service goes with the Job.
func TestServiceReplicaIsReachedThroughItsService(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{KeepFinished: new(model.Duration(0)), SyncImage: testSyncImage}, h100("n1").obj())
	h.run()
	eventually(t, "registration", func() bool { return len(h.cp.registrations()) > 0 })
	s := serviceSpec("j-svc", "8000")
	h.cp.want(h.node, s)
	job := h.job("gf-j-svc-a1-r0")
	svc, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-svc-a1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the replica's Service: %v", err)
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8000 {
		t.Errorf("service %+v", svc.Spec)
	}
	pod := podOf(job, 0, "n1", corev1.PodRunning)
	h.createPod(pod)
	want := "gf-j-svc-a1." + DefaultNamespace + ".svc:8000"
	if st := h.waitPhase(s.ID, agentapi.PhaseRunning); st.Endpoint != want {
		t.Errorf("running replica's endpoint %q, want %q", st.Endpoint, want)
	}
	pod.Status.Phase = corev1.PodSucceeded
	h.updatePod(exited(pod, 0))
	h.waitPhase(s.ID, agentapi.PhaseExited)
	eventually(t, "the Job deleted", func() bool { return h.jobGone(job.Name) })
	eventually(t, "the Service deleted with it", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-svc-a1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
