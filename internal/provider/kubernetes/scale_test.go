package kubernetes

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestScale runs 5,000 one-GPU jobs on 1,000 eight-GPU nodes (one virtual
// node) through the runner, the test acting as the Job controller and the
// kubelet: every Job is created once, every replica reported running and
// exited, every Job deleted afterwards. The fake clientset's creates
// dominate its time (minutes under -race), so it runs on request:
//
//	GPUFLEET_KUBE_SCALE=1 go test -run TestScale -v ./internal/provider/kubernetes/
func TestScale(t *testing.T) {
	if os.Getenv("GPUFLEET_KUBE_SCALE") == "" {
		t.Skip("set GPUFLEET_KUBE_SCALE=1 to run 5,000 jobs through the fake clientset")
	}
	const nodes, jobs = 1000, 5000
	objs := make([]runtime.Object, nodes)
	for i := range objs {
		objs[i] = h100(fmt.Sprintf("n%04d", i)).obj()
	}
	h := newHarness(t, model.KubernetesPoolSettings{PricePerGPUHour: 1}, objs...)
	h.run()
	specs := make([]agentapi.ReplicaSpec, jobs)
	for i := range specs {
		specs[i] = spec(fmt.Sprintf("j-%05d", i), 0, 1, i)
	}
	start := time.Now()
	h.cp.want(h.node, specs...)
	deadline := time.Now().Add(5 * time.Minute)
	waitFor := func(what string, cond func() bool) {
		last := time.Now()
		for !cond() {
			if time.Since(last) > 5*time.Second {
				last = time.Now()
				h.cp.mu.Lock()
				n := map[agentapi.Phase]int{}
				for _, s := range h.cp.latest {
					n[s.Phase]++
				}
				h.cp.mu.Unlock()
				t.Logf("%v: %s: %v, creates %d, deletes %d, pods %d", time.Since(start), what, n, len(h.actions("create", "jobs")), len(h.actions("delete", "jobs")), len(h.c.pods.ListKeys()))
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("5,000 Jobs", func() bool { return len(h.actions("create", "jobs")) >= jobs })
	created := time.Since(start)
	list, err := h.cs.BatchV1().Jobs(DefaultNamespace).List(bg, metav1.ListOptions{})
	if err != nil || len(list.Items) != jobs {
		t.Fatalf("%d Jobs, %v", len(list.Items), err)
	}
	for i := range list.Items {
		p := exited(podOf(&list.Items[i], 0, fmt.Sprintf("n%04d", i%nodes), corev1.PodSucceeded), 0)
		h.createPod(p)
	}
	waitFor("every replica exited", func() bool {
		h.cp.mu.Lock()
		defer h.cp.mu.Unlock()
		n := 0
		for _, s := range h.cp.latest {
			if s.Phase == agentapi.PhaseExited {
				n++
			}
		}
		return n == jobs
	})
	reported := time.Since(start)
	waitFor("every Job deleted", func() bool { return len(h.actions("delete", "jobs")) >= jobs })
	t.Logf("5,000 Jobs created in %v, all reported in %v, all deleted in %v", created, reported, time.Since(start))
	if n := len(h.actions("create", "jobs")); n != jobs {
		t.Errorf("%d Job creates, want %d", n, jobs)
	}
}
