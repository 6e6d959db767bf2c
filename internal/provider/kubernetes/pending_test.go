package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// unschedulablePod marks p as kube-scheduler leaves a pod it cannot place.
func unschedulablePod(p *corev1.Pod, msg string) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	return p
}

func TestUnschedulablePodTimesOut(t *testing.T) {
	const msg = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
	h := newHarness(t, model.KubernetesPoolSettings{PendingTimeout: model.Duration(300 * time.Millisecond)}, h100("n1").obj())
	h.run()
	s := spec("j-stuck", 0, 1, 0)
	h.cp.want(h.node, s)
	job := h.job("gf-j-stuck-a1-r0")
	start := time.Now()
	h.createPod(unschedulablePod(podOf(job, 0, "", corev1.PodPending), msg))
	st := h.waitPhase(s.ID, agentapi.PhaseLost)
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("lost after %s, before the timeout", waited)
	}
	if !strings.Contains(st.Reason, msg) || !strings.Contains(st.Reason, "could not be scheduled for 300ms") {
		t.Errorf("reason = %q", st.Reason)
	}
	eventually(t, "the stuck Job deleted", func() bool { return h.jobGone(job.Name) })
}

func TestCheckPending(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const timeout = 10 * time.Minute
	stuck := unschedulablePod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}, "no GPUs")
	scheduled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	scheduled.Spec.NodeName = "n1"
	type step struct {
		pod      *corev1.Pod
		at       time.Duration
		wantDue  time.Duration // -1: none
		wantLost bool
	}
	for name, steps := range map[string][]step{
		"times out from when it was first seen stuck": {{stuck, 0, timeout, false}, {stuck, 5 * time.Minute, timeout, false}, {stuck, timeout, -1, true}},
		"scheduled in time starts over":               {{stuck, 0, timeout, false}, {scheduled, 9 * time.Minute, -1, false}, {stuck, 12 * time.Minute, 22 * time.Minute, false}},
		"no pod yet":                                  {{nil, 0, -1, false}, {nil, time.Hour, -1, false}},
	} {
		t.Run(name, func(t *testing.T) {
			r := &replica{id: "x"}
			for i, s := range steps {
				var pods []*corev1.Pod
				if s.pod != nil {
					pods = []*corev1.Pod{s.pod}
				}
				due, lost := r.checkPending(pods, t0.Add(s.at), timeout)
				wantDue := time.Time{}
				if s.wantDue >= 0 {
					wantDue = t0.Add(s.wantDue)
				}
				if !due.Equal(wantDue) || lost != s.wantLost {
					t.Errorf("step %d: due %v lost %v, want %v %v", i, due, lost, wantDue, s.wantLost)
				}
			}
			if steps[len(steps)-1].wantLost && (r.status.Phase != agentapi.PhaseLost || !strings.Contains(r.status.Reason, "no GPUs")) {
				t.Errorf("status = %+v", r.status)
			}
		})
	}
}
