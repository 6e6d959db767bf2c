package kubernetes

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/logstore"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
)

// TestWithTheController runs a gang job through the real controller: it is
// placed on the virtual node, runs as one indexed Job, and succeeds; its
// logs and the node's price reach the server.
func TestWithTheController(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs, err := logstore.New(filepath.Join(dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(ctx, controller.Config{Store: st, Logs: logs, CheckpointDir: filepath.Join(dir, "ckpt"),
		Fatal: func(err error) { t.Errorf("store failed: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	ran := make(chan error, 1)
	go func() { ran <- ctrl.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	h := newHarness(t, model.KubernetesPoolSettings{PricePerGPUHour: 2}, h100("n1").obj(), h100("n2").obj())
	run(t, h.c, ctrl)
	eventually(t, "the virtual node", func() bool {
		for _, n := range ctrl.Nodes() {
			if n.ID == h.node && len(n.GPUs) == 16 && n.Pool == "k8s" && n.PricePerHour == 32 && n.State == model.NodeReady {
				return true
			}
		}
		return false
	})

	job, _, err := ctrl.Submit(ctx, controller.Submission{Project: "default", Tags: map[string]string{"kwok-duration": "1s"}, Spec: func() model.JobSpec {
		s := model.JobSpec{Replicas: 2, Resources: model.Resources{GPUs: 8, GPU: model.GPURequest{Models: []string{"H100"}}},
			Run: model.RunSpec{Command: []string{"torchrun", "train.py"}, Image: "ghcr.io/acme/train:1"}}
		s.Default()
		return s
	}()})
	if err != nil {
		t.Fatal(err)
	}
	attempt := model.AttemptID(job.ID, 1)
	k8sJob := h.job(jobName(attempt, 0))
	if *k8sJob.Spec.Completions != 2 || k8sJob.Spec.Template.Annotations["tags.gpufleet.dev/kwok-duration"] != "1s" ||
		k8sJob.Spec.Template.Spec.Containers[0].Image != "ghcr.io/acme/train:1" || k8sJob.Labels[LabelProject] != "default" {
		t.Errorf("job %+v", k8sJob)
	}
	var pods []*corev1.Pod
	for i, n := range []string{"n1", "n2"} {
		p := podOf(k8sJob, i, n, corev1.PodRunning)
		h.createPod(p)
		pods = append(pods, p)
	}
	eventually(t, "the job running", func() bool { j, _ := ctrl.Job(job.ID); return j.State == model.JobRunning })
	for _, p := range pods {
		p.Status.Phase = corev1.PodSucceeded
		h.updatePod(exited(p, 0))
	}
	eventually(t, "the job succeeded", func() bool { j, _ := ctrl.Job(job.ID); return j.State == model.JobSucceeded })
	for rank := range 2 {
		key := logstore.Key{JobID: job.ID, Attempt: 1, Rank: rank}
		eventually(t, "the complete log", func() bool { _, complete, _ := logs.Size(key); return complete })
		var buf bytes.Buffer
		if _, err := logs.ReadAt(key, 0, &buf); err != nil || buf.String() != "fake logs" {
			t.Errorf("log of rank %d = %q, %v", rank, buf.String(), err)
		}
	}
	eventually(t, "the Job and Service cleaned up", func() bool {
		_, err := h.cs.CoreV1().Services(DefaultNamespace).Get(bg, serviceName(attempt), metav1.GetOptions{})
		return h.jobGone(k8sJob.Name) && err != nil
	})
}
