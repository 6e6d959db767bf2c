package kubernetes

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// podView is what one pod says about its replica. Phase "" means nothing to
// report yet (pending).
type podView struct {
	phase    agentapi.Phase
	exitCode *int
	reason   string
	started  time.Time
	ended    time.Time
}

// viewPod maps a pod onto a replica phase. nodeGone says whether a node no
// longer exists, and why. Involuntary ends (node deleted, eviction,
// preemption, any DisruptionTarget) are PhaseLost, so the attempt is
// requeued like a spot loss; the pod's own exit is PhaseExited with its
// container's exit code.
func viewPod(p *corev1.Pod, nodeGone func(string) (string, bool)) podView {
	v := podView{}
	if p.Status.StartTime != nil {
		v.started = p.Status.StartTime.Time
	}
	term := terminated(p)
	if term != nil {
		code := int(term.ExitCode)
		v.exitCode = &code
		v.ended = term.FinishedAt.Time
		if !term.StartedAt.IsZero() {
			v.started = term.StartedAt.Time
		}
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if !terminal {
		if why, gone := nodeGone(p.Spec.NodeName); gone {
			return podView{phase: agentapi.PhaseLost, reason: why, started: v.started}
		}
	}
	if p.Status.Phase != corev1.PodSucceeded {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				return podView{phase: agentapi.PhaseLost, reason: disruption(c), started: v.started, ended: v.ended}
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodRunning:
		v.phase = agentapi.PhaseRunning
		if v.started.IsZero() {
			v.started = p.CreationTimestamp.Time
		}
	case corev1.PodSucceeded:
		v.phase = agentapi.PhaseExited
		if v.exitCode == nil {
			v.exitCode = new(0)
		}
	case corev1.PodFailed:
		switch p.Status.Reason {
		case "Evicted", "Preempting", "NodeLost", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError":
			return podView{phase: agentapi.PhaseLost, reason: fmt.Sprintf("pod %s failed (%s): %s", p.Name, p.Status.Reason, p.Status.Message), started: v.started}
		}
		v.phase = agentapi.PhaseExited
		if v.exitCode == nil {
			v.reason = fmt.Sprintf("pod %s failed without an exit code (%s): %s", p.Name, p.Status.Reason, p.Status.Message)
			if why := initFailure(p); why != "" {
				v.reason = fmt.Sprintf("pod %s: %s", p.Name, why)
			}
		}
	case corev1.PodPending:
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && (w.Reason == "InvalidImageName" || w.Reason == "ErrImageNeverPull") {
				return podView{phase: agentapi.PhaseExited, reason: fmt.Sprintf("pod %s cannot start: %s: %s", p.Name, w.Reason, w.Message)}
			}
		}
	}
	return v
}

// initFailure says which init container (a sync container: fetching the
// datasets, restoring the checkpoint) failed and how, or "".
func initFailure(p *corev1.Pod) string {
	for _, cs := range p.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = t.Reason
			}
			return fmt.Sprintf("init container %s exited %d: %s", cs.Name, t.ExitCode, msg)
		}
	}
	return ""
}

func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	return nil
}

// disruption says why Kubernetes took a pod away.
func disruption(c corev1.PodCondition) string {
	what := map[string]string{
		"PreemptionByScheduler":   "preempted by kube-scheduler",
		"DeletionByTaintManager":  "evicted by the taint manager (its node is not ready or was tainted)",
		"EvictionByEvictionAPI":   "evicted (node drain or disruption)",
		"DeletionByPodGC":         "deleted by the pod garbage collector (its node is gone)",
		"TerminationByKubelet":    "terminated by the kubelet (node shutdown or resource pressure)",
		"DeletionByNodeLifecycle": "deleted by the node lifecycle controller",
	}[c.Reason]
	if what == "" {
		what = "disrupted (" + c.Reason + ")"
	}
	if c.Message != "" {
		return "pod " + what + ": " + c.Message
	}
	return "pod " + what
}

// jobFailure returns a Job's Failed condition, if any.
func jobFailure(j *batchv1.Job) *batchv1.JobCondition {
	if j == nil {
		return nil
	}
	for i, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return &j.Status.Conditions[i]
		}
	}
	return nil
}

// finished reports whether the Job controller has ended j: Complete or
// Failed.
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// active reports whether a pod may still run.
func active(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// newest returns the most recently created pod, or nil.
func newest(pods []*corev1.Pod) *corev1.Pod {
	var out *corev1.Pod
	for _, p := range pods {
		if out == nil || out.CreationTimestamp.Before(&p.CreationTimestamp) ||
			out.CreationTimestamp.Equal(&p.CreationTimestamp) && out.Name < p.Name {
			out = p
		}
	}
	return out
}

// ended reports whether a phase is final.
func ended(p agentapi.Phase) bool { return p == agentapi.PhaseExited || p == agentapi.PhaseLost }

// observe moves r's status on from what the caches hold: its pods, its Job
// (nil when the cache has none) and the nodes. A final status never
// changes. It returns true when the replica was lost, so its Job should go.
func (r *replica) observe(pods []*corev1.Pod, job *batchv1.Job, js *jobState, nodeGone func(string) (string, bool), now time.Time) (lost bool) {
	if ended(r.status.Phase) {
		return false
	}
	end := func(phase agentapi.Phase, code *int, reason string) {
		r.status.Phase, r.status.ExitCode, r.status.Reason = phase, code, reason
		r.status.EndedAt = new(now)
		if r.status.StartedAt.IsZero() {
			r.status.StartedAt = now
		}
	}
	if r.refused != "" {
		end(r.refusedPhase, nil, r.refused)
		return false
	}
	if job != nil {
		r.seenJob = true
	}
	p := newest(pods)
	var view podView
	if p != nil {
		r.seenPod, r.podName, r.podNode = true, p.Name, p.Spec.NodeName
		view = viewPod(p, nodeGone)
		if view.exitCode != nil {
			r.lastExit = view.exitCode
		}
		if !view.started.IsZero() && r.status.StartedAt.IsZero() && view.phase != "" {
			r.status.StartedAt = view.started
		}
	}
	if r.stopping {
		if view.phase == agentapi.PhaseRunning {
			r.status.Phase = agentapi.PhaseRunning
		}
		anyActive := false
		for _, p := range pods {
			anyActive = anyActive || active(p)
		}
		if js == nil || js.deleted && !anyActive {
			end(agentapi.PhaseExited, r.lastExit, agentapi.ReasonStopped)
		}
		return false
	}
	if f := jobFailure(job); f != nil && f.Reason == batchv1.JobReasonDeadlineExceeded {
		end(agentapi.PhaseExited, r.lastExit, model.ReasonRuntimeLimit)
		return false
	}
	if p != nil {
		switch view.phase {
		case agentapi.PhaseRunning:
			r.status.Phase = agentapi.PhaseRunning
		case agentapi.PhaseExited:
			end(agentapi.PhaseExited, view.exitCode, view.reason)
		case agentapi.PhaseLost:
			end(agentapi.PhaseLost, nil, view.reason)
			return true
		}
		return false
	}
	why, gone := nodeGone(r.podNode)
	switch f := jobFailure(job); {
	case r.seenPod && gone:
		end(agentapi.PhaseLost, nil, why)
		return true
	case f != nil:
		// The Job gave up: another replica of the gang failed, or its
		// pods could not be created. Not an interruption.
		end(agentapi.PhaseExited, r.lastExit, fmt.Sprintf("Job %s failed (%s): %s", js.name, f.Reason, f.Message))
	case r.seenPod:
		end(agentapi.PhaseLost, nil, fmt.Sprintf("pod %s vanished before it finished", r.podName))
		return true
	case r.seenJob && job == nil:
		end(agentapi.PhaseLost, nil, fmt.Sprintf("Job %s was deleted outside gpufleet", r.job))
		return true
	}
	return false
}

// unschedulable returns the scheduler's message for a pod that waits for a
// node it cannot have: Pending, unbound, PodScheduled False (Unschedulable).
func unschedulable(p *corev1.Pod) (string, bool) {
	if p == nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		return "", false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// checkPending ends r lost once its pod has been unschedulable for
// timeout (by the Options clock: since the driver first saw it so), so the
// GPUs gpufleet counts as held are given back and the job requeues. It
// returns when to look again (zero: no need) and whether r was lost.
func (r *replica) checkPending(pods []*corev1.Pod, now time.Time, timeout time.Duration) (due time.Time, lost bool) {
	if r.stopping || r.status.Phase != "" || timeout <= 0 {
		r.pendingSince = time.Time{}
		return time.Time{}, false
	}
	p := newest(pods)
	msg, stuck := unschedulable(p)
	if !stuck {
		r.pendingSince = time.Time{}
		return time.Time{}, false
	}
	if r.pendingSince.IsZero() {
		r.pendingSince = now
	}
	due = r.pendingSince.Add(timeout)
	if now.Before(due) {
		return due, false
	}
	if msg == "" {
		msg = "no reason given"
	}
	r.status.Phase, r.status.Reason = agentapi.PhaseLost, fmt.Sprintf("pod %s could not be scheduled for %s: %s", p.Name, timeout, msg)
	r.status.StartedAt, r.status.EndedAt = now, new(now)
	r.podName = "" // it never ran: no log to read, only its end to send
	return time.Time{}, true
}
