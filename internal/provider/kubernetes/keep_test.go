package kubernetes

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// keeping is pool settings that keep finished Jobs for 5 minutes.
func keeping() model.KubernetesPoolSettings {
	return model.KubernetesPoolSettings{KeepFinished: new(model.Duration(5 * time.Minute))}
}

// markFinished sets the condition the Job controller sets on a Job whose
// pods all ended.
func (h *harness) markFinished(name string, cond batchv1.JobConditionType) {
	h.t.Helper()
	j, err := h.cs.BatchV1().Jobs(DefaultNamespace).Get(bg, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: cond, Status: corev1.ConditionTrue})
	if _, err := h.cs.BatchV1().Jobs(DefaultNamespace).UpdateStatus(bg, j, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) secretGone(name string) bool {
	_, err := h.cs.CoreV1().Secrets(DefaultNamespace).Get(bg, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func TestKeepsFinishedJobsForTheTTLController(t *testing.T) {
	for _, cond := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		t.Run(string(cond), func(t *testing.T) {
			h := newHarness(t, keeping(), h100("n1").obj())
			h.run()
			s := withSecrets(spec("j-keep", 0, 1, 0))
			h.cp.want(h.node, s)
			job := h.job("gf-j-keep-a1-r0")
			if ttl := job.Spec.TTLSecondsAfterFinished; ttl == nil || *ttl != 300 {
				t.Fatalf("ttlSecondsAfterFinished = %v, want 300", ttl)
			}
			code := int32(0)
			if cond == batchv1.JobFailed {
				code = 3
			}
			pod := podOf(job, 0, "n1", corev1.PodSucceeded)
			if code != 0 {
				pod.Status.Phase = corev1.PodFailed
			}
			h.createPod(exited(pod, code))
			h.waitPhase(s.ID, agentapi.PhaseExited)
			eventually(t, "the log closed", func() bool { _, eof := h.cp.log(s.ID); return eof })

			// Recorded and shipped, but the Job controller has not
			// finished the Job yet: it waits for that, deleting nothing.
			time.Sleep(150 * time.Millisecond)
			if h.jobGone(job.Name) || h.secretGone(job.Name) {
				t.Fatalf("Job gone %v, Secret gone %v before the Job finished; want both kept", h.jobGone(job.Name), h.secretGone(job.Name))
			}

			h.markFinished(job.Name, cond)
			eventually(t, "the Secret deleted", func() bool { return h.secretGone(job.Name) })
			time.Sleep(150 * time.Millisecond)
			if h.jobGone(job.Name) || len(h.actions("delete", "jobs")) != 0 {
				t.Errorf("the finished Job was deleted (%d deletes); want it left to the TTL controller", len(h.actions("delete", "jobs")))
			}

			// The TTL controller deletes it later: nothing to do.
			if err := h.cs.BatchV1().Jobs(DefaultNamespace).Delete(bg, job.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if n := len(h.actions("create", "jobs")); n != 1 {
				t.Errorf("%d Job creates, want 1", n)
			}
		})
	}
}

func TestKeepingStillDeletesStoppedJobs(t *testing.T) {
	h := newHarness(t, keeping(), h100("n1").obj())
	h.run()
	s := spec("j-keepstop", 0, 1, 0)
	h.cp.want(h.node, s)
	job := h.job("gf-j-keepstop-a1-r0")
	h.createPod(podOf(job, 0, "n1", corev1.PodRunning))
	h.waitPhase(s.ID, agentapi.PhaseRunning)
	h.cp.stop(h.node, s.AttemptID)
	eventually(t, "the cancelled Job deleted", func() bool { return len(h.actions("delete", "jobs")) == 1 })
}

func TestKeptGangJobGivesUpItsService(t *testing.T) {
	h := newHarness(t, keeping(), h100("n1").obj(), h100("n2").obj())
	h.run()
	specs := []agentapi.ReplicaSpec{spec("j-kg", 0, 2, 0, 1, 2, 3, 4, 5, 6, 7), spec("j-kg", 1, 2, 8, 9, 10, 11, 12, 13, 14, 15)}
	h.cp.want(h.node, specs...)
	job := h.job("gf-j-kg-a1-r0")
	eventually(t, "the gang's Service", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-kg-a1", metav1.GetOptions{})
		return err == nil
	})
	h.createPod(exited(podOf(job, 0, "n1", corev1.PodSucceeded), 0))
	h.createPod(exited(podOf(job, 1, "n2", corev1.PodSucceeded), 0))
	h.waitPhase(specs[0].ID, agentapi.PhaseExited)
	h.waitPhase(specs[1].ID, agentapi.PhaseExited)
	h.markFinished(job.Name, batchv1.JobComplete)
	eventually(t, "the Service deleted", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, "gf-j-kg-a1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if h.jobGone(job.Name) {
		t.Error("the finished gang Job was deleted; want it kept")
	}
}

func TestRestartSkipsLogsShippedBefore(t *testing.T) {
	// A finished Job kept from a previous run, whose log the server
	// already holds whole.
	s := spec("j-kept", 0, 1, 0)
	plan := jobPlan{pool: "k8s", settings: withDefaults(keeping()), node: &nodeTarget{id: "x"}, specs: []agentapi.ReplicaSpec{s}}
	job, _ := plan.build()
	first := newHarness(t, keeping(), h100("n1").obj())
	job.Labels[LabelNode], job.Spec.Template.Labels[LabelNode] = first.node, first.node
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	pod := exited(podOf(job, 0, "n1", corev1.PodSucceeded), 0)
	h := newHarness(t, keeping(), h100("n1").obj(), job, pod)
	h.cp.mu.Lock()
	h.cp.logs[s.ID], h.cp.eof[s.ID] = []byte("all of it"), true
	h.cp.mu.Unlock()
	h.run()
	eventually(t, "the adopted replica reported", func() bool { return h.cp.status(s.ID).Phase == agentapi.PhaseExited })
	eventually(t, "its Secret released", func() bool { return len(h.actions("delete", "secrets")) == 1 })
	for _, a := range h.cs.Actions() {
		if a.GetResource().Resource == "pods" && a.GetSubresource() == "log" {
			t.Errorf("read the pod log again: %v", a)
		}
	}
	if h.jobGone(job.Name) {
		t.Error("the kept Job was deleted")
	}
}
