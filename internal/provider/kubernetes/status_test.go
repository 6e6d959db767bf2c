package kubernetes

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

func TestObserve(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	job := &batchv1.Job{}
	job.Name = "gf-j-a1-r0"
	pod := func(phase corev1.PodPhase, mods ...func(*corev1.Pod)) []*corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: phase}}
		for _, m := range mods {
			m(p)
		}
		return []*corev1.Pod{p}
	}
	exit := func(code int32) func(*corev1.Pod) { return func(p *corev1.Pod) { exited(p, code) } }
	cond := func(reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: reason})
		}
	}
	failedJob := func(reason string) *batchv1.Job {
		j := job.DeepCopy()
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: "msg"}}
		return j
	}
	gone := func(name string) (string, bool) {
		if name == "gone" || name == "n-old" {
			return "node " + name + " deleted (spot loss)", true
		}
		return "", false
	}
	type want struct {
		Phase  agentapi.Phase
		Code   *int
		Reason string // a prefix
		Lost   bool   // observe says delete the Job
	}
	for name, tc := range map[string]struct {
		before replica
		pods   []*corev1.Pod
		job    *batchv1.Job
		js     *jobState
		want   want
	}{
		"no pod yet":         {job: job, want: want{}},
		"pending":            {pods: pod(corev1.PodPending), job: job, want: want{}},
		"running":            {pods: pod(corev1.PodRunning), job: job, want: want{Phase: agentapi.PhaseRunning}},
		"succeeded":          {pods: pod(corev1.PodSucceeded, exit(0)), job: job, want: want{Phase: agentapi.PhaseExited, Code: new(0)}},
		"succeeded, no code": {pods: pod(corev1.PodSucceeded), job: job, want: want{Phase: agentapi.PhaseExited, Code: new(0)}},
		"failed with exit code": {pods: pod(corev1.PodFailed, exit(3)), job: failedJob("BackoffLimitExceeded"),
			want: want{Phase: agentapi.PhaseExited, Code: new(3)}},
		"evicted": {pods: pod(corev1.PodFailed, func(p *corev1.Pod) { p.Status.Reason = "Evicted" }), job: job,
			want: want{Phase: agentapi.PhaseLost, Reason: "pod p failed (Evicted)", Lost: true}},
		"disruption target": {pods: pod(corev1.PodRunning, cond("PreemptionByScheduler")), job: job,
			want: want{Phase: agentapi.PhaseLost, Reason: "pod preempted by kube-scheduler", Lost: true}},
		"failed after disruption": {pods: pod(corev1.PodFailed, cond("EvictionByEvictionAPI"), exit(143)), job: job,
			want: want{Phase: agentapi.PhaseLost, Reason: "pod evicted", Lost: true}},
		"its node was deleted": {pods: pod(corev1.PodRunning, func(p *corev1.Pod) { p.Spec.NodeName = "gone" }), job: job,
			want: want{Phase: agentapi.PhaseLost, Reason: "node gone deleted (spot loss)", Lost: true}},
		"a finished pod on a deleted node stays finished": {pods: pod(corev1.PodSucceeded, exit(0), func(p *corev1.Pod) { p.Spec.NodeName = "gone" }),
			job: job, want: want{Phase: agentapi.PhaseExited, Code: new(0)}},
		"pod vanished": {before: replica{seenPod: true, podName: "p", podNode: "n1", status: agentapi.ReplicaStatus{Phase: agentapi.PhaseRunning}}, job: job,
			want: want{Phase: agentapi.PhaseLost, Reason: "pod p vanished", Lost: true}},
		"pod vanished with its node": {before: replica{seenPod: true, podName: "p", podNode: "n-old"}, job: failedJob("BackoffLimitExceeded"),
			want: want{Phase: agentapi.PhaseLost, Reason: "node n-old deleted", Lost: true}},
		"pod gone because the gang failed": {before: replica{seenPod: true, podName: "p", podNode: "n1"}, job: failedJob("BackoffLimitExceeded"),
			js: &jobState{name: "gf-j-a1-r0"}, want: want{Phase: agentapi.PhaseExited, Reason: "Job gf-j-a1-r0 failed (BackoffLimitExceeded)"}},
		"job deleted outside gpufleet": {before: replica{seenJob: true, job: "gf-j-a1-r0"},
			want: want{Phase: agentapi.PhaseLost, Reason: "Job gf-j-a1-r0 was deleted outside gpufleet", Lost: true}},
		"runtime limit": {pods: pod(corev1.PodFailed, exit(143)), job: failedJob(batchv1.JobReasonDeadlineExceeded),
			want: want{Phase: agentapi.PhaseExited, Code: new(143), Reason: model.ReasonRuntimeLimit}},
		"invalid image": {pods: pod(corev1.PodPending, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName"}}}}
		}), job: job, want: want{Phase: agentapi.PhaseExited, Reason: "pod p cannot start: InvalidImageName"}},
		"stopping, pod still running": {before: replica{stopping: true}, pods: pod(corev1.PodRunning), job: job, js: &jobState{deleted: true},
			want: want{Phase: agentapi.PhaseRunning}},
		"stopping, delete not yet accepted": {before: replica{stopping: true}, job: job, js: &jobState{}, want: want{}},
		"stopped once its pods are gone": {before: replica{stopping: true, seenPod: true, lastExit: new(143)}, js: &jobState{deleted: true},
			want: want{Phase: agentapi.PhaseExited, Code: new(143), Reason: agentapi.ReasonStopped}},
		"stopped with a finished pod": {before: replica{stopping: true}, pods: pod(corev1.PodFailed, exit(143)), job: job, js: &jobState{deleted: true},
			want: want{Phase: agentapi.PhaseExited, Code: new(143), Reason: agentapi.ReasonStopped}},
		"refused": {before: replica{refused: "no container image", refusedPhase: agentapi.PhaseExited},
			want: want{Phase: agentapi.PhaseExited, Reason: "no container image"}},
		"final stays final": {before: replica{status: agentapi.ReplicaStatus{Phase: agentapi.PhaseExited, ExitCode: new(0)}},
			pods: pod(corev1.PodFailed, exit(1)), job: job, want: want{Phase: agentapi.PhaseExited, Code: new(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			r := tc.before
			if r.job == "" {
				r.job = job.Name
			}
			js := tc.js
			if js == nil {
				js = &jobState{name: job.Name}
			}
			lost := r.observe(tc.pods, tc.job, js, gone, now)
			got := want{Phase: r.status.Phase, Code: r.status.ExitCode, Reason: r.status.Reason, Lost: lost}
			if tc.want.Reason != "" && strings.HasPrefix(got.Reason, tc.want.Reason) {
				got.Reason = tc.want.Reason
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("observe (-want +got):\n%s", diff)
			}
			if !ended(tc.before.status.Phase) && ended(r.status.Phase) && (r.status.EndedAt == nil || r.status.StartedAt.IsZero()) {
				t.Errorf("a final status without start and end: %+v", r.status)
			}
		})
	}
}
