package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sclient "k8s.io/client-go/kubernetes"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/kubetest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/provider/kubernetes"
	"github.com/gpufleet/gpufleet/internal/s3test"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestKubernetesPoolE2E runs the real binary against a real control plane
// (internal/kubetest; skipped without its binaries unless CI=true): a
// headless server, a NodePool of provider kubernetes applied from a
// manifest, a one-GPU job run with `gpufleet run` on two KWOK nodes, and
// the pool's removal, which must leave nothing labelled behind.
func TestKubernetesPoolE2E(t *testing.T) {
	t.Parallel()
	began := time.Now()
	kc := kubetest.Start(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	cs := kc.Client()
	const ns, pool = "gpufleet-e2e", "kwok"
	// The operator creates the namespace (docs/kubernetes.md).
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc.AddGPUNodes(ctx, 2, kubetest.NodeSpec{})
	t.Logf("control plane and 2 nodes ready after %s", time.Since(began).Round(time.Millisecond))

	s := startHeadless(t, t.TempDir(), freePort(t))
	// Checkpoint storage: the pool's pods sync with it (docs/kubernetes.md).
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	set := s.gpufleetCmd("secrets", "set", "default", "S3_CKPT")
	set.Stdin = strings.NewReader(s3test.AccessKey + ":" + s3test.SecretKey)
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("secrets set: %v\n%s", err, out)
	}
	dir := t.TempDir()
	poolFile := filepath.Join(dir, "pool.yaml")
	manifest := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: %s}
spec:
  provider: kubernetes
  kubernetes:
    kubeconfig: %q
    context: %s
    namespace: %s
    image: ghcr.io/acme/train:1
    syncImage: registry.example/gpufleet:e2e
    pricePerGPUHour: 2
  checkpointStorage:
    s3: {bucket: ckpt, endpoint: %q, pathStyle: true, credentialsRef: default/S3_CKPT}
`, pool, kc.Kubeconfig, kc.Context, ns, srv.Endpoint)
	if err := os.WriteFile(poolFile, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", poolFile, "-m", "add the kubernetes pool")

	// One virtual node: 2 nodes × 8 H100s, on-demand, in us-east-1a.
	var node struct {
		ID    string
		Price float64
	}
	waitFor(t, s, "the virtual node", func() bool {
		for _, n := range decodeItems[model.NodeInfo](t, s.gpufleet("nodes", "list", "-o", "json")) {
			if n.Pool == pool && n.State == model.NodeReady && len(n.GPUs) == 16 {
				node.ID, node.Price = n.ID, n.PricePerHour
				return true
			}
		}
		return false
	})
	if node.Price != 32 {
		t.Errorf("virtual node %s costs %v an hour, want 16 GPUs × $2", node.ID, node.Price)
	}

	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "1", "--tag", "kwok-duration=1s", "--", "python", "train.py"))
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded {
		t.Fatalf("job %s ended %s (%s), want succeeded\nserver log:\n%s", id, v.State, v.Reason, s.out)
	}
	events := decodeItems[model.Event](t, s.gpufleet("events", "--job", id, "-o", "json"))
	ended := false
	for _, e := range events {
		ended = ended || e.Kind == model.EventAttemptEnd && e.Node == node.ID
	}
	if !ended {
		t.Errorf("no attempt-end event on %s for job %s: %+v", node.ID, id, events)
	}

	// A job that is still running when the pool goes: its Job must go too.
	long := strings.TrimSpace(s.gpufleet("run", "--gpus", "1", "--tag", "kwok-duration=1h", "--", "python", "train.py"))
	s.waitJob(long, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	checkSyncedPod(ctx, t, cs, ns, long)

	// A service's replica on the pool: behind its gate, with its policy.
	svcFile := filepath.Join(dir, "svc.yaml")
	if err := os.WriteFile(svcFile, []byte(`apiVersion: gpufleet.dev/v1
kind: Service
metadata: {name: llm, tags: {kwok-duration: 1h}}
spec:
  template:
    run: {image: ghcr.io/acme/vllm:1, command: [vllm, serve, /models/qwen]}
    resources: {gpus: 1}
  port: 8000
  replicas: {min: 1, max: 1}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("services", "apply", "-f", svcFile)
	checkGatedPod(ctx, t, s, cs, ns, pool)

	// Apply the fleet without the pool.
	other := filepath.Join(dir, "projects.yaml")
	if err := os.WriteFile(other, []byte("apiVersion: gpufleet.dev/v1\nkind: Project\nmetadata: {name: nlp}\nspec: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", other, "-m", "remove the kubernetes pool")
	selector := metav1.ListOptions{LabelSelector: kubernetes.LabelManagedBy}
	var left []string
	waitFor(t, s, "no gpufleet objects left in the cluster", func() bool {
		left = left[:0]
		jobs, err := cs.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Items {
			left = append(left, "job/"+j.Name)
		}
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			left = append(left, "pod/"+p.Name)
		}
		svcs, err := cs.CoreV1().Services(metav1.NamespaceAll).List(ctx, selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, sv := range svcs.Items {
			left = append(left, "service/"+sv.Name)
		}
		// The pool's default deny goes with the pool.
		pols, err := cs.NetworkingV1().NetworkPolicies(metav1.NamespaceAll).List(ctx, selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, np := range pols.Items {
			left = append(left, "networkpolicy/"+np.Name)
		}
		return len(left) == 0
	})
	t.Logf("pool applied, job run, pool removed and cleaned up after %s", time.Since(began).Round(time.Millisecond))
}

// checkGatedPod checks that a service's replica, submitted by the server's
// services manager, runs on the pool behind its gate: the gate container
// reads the project's replica key from the Job's Secret, which holds it
// (the Job does not), the Service targets the gate's port, and the
// NetworkPolicies admit only that port beside the pool's default deny.
func checkGatedPod(ctx context.Context, t *testing.T, s *serverProc, cs k8sclient.Interface, ns, pool string) {
	t.Helper()
	var job *batchv1.Job
	waitFor(t, s, "the service replica's Job", func() bool {
		jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManagedBy + "=" + pool})
		if err != nil {
			t.Fatal(err)
		}
		for i := range jobs.Items {
			if jobs.Items[i].Annotations[kubernetes.AnnotationEndpoint] != "" {
				job = &jobs.Items[i]
			}
		}
		return job != nil
	})
	spec := job.Spec.Template.Spec
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == kubernetes.ContainerGate })
	if i < 0 {
		t.Fatalf("the service replica's pod has no gate: %+v", spec.InitContainers)
	}
	gate := spec.InitContainers[i]
	if gate.Image != "registry.example/gpufleet:e2e" || len(gate.Env) != 1 || gate.Env[0].ValueFrom == nil || gate.Env[0].ValueFrom.SecretKeyRef.Name != job.Name {
		t.Errorf("gate container %+v, want the sync image and the key from Secret %s", gate, job.Name)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := string(sec.Data[model.ServiceKeySecret])
	if len(key) < 32 {
		t.Fatalf("the Secret's %s is %d bytes, want the project's key", model.ServiceKeySecret, len(key))
	}
	if b, _ := json.Marshal(job); strings.Contains(string(b), key) {
		t.Error("the Job holds the replica key")
	}
	svcName := strings.SplitN(job.Annotations[kubernetes.AnnotationEndpoint], ".", 2)[0]
	svc, err := cs.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil || svc.Spec.Ports[0].Port != 8000 || svc.Spec.Ports[0].TargetPort.IntValue() != kubernetes.DefaultGatePort {
		t.Fatalf("the replica's Service %s: %+v, %v; want 8000 → the gate", svcName, svc, err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != kubernetes.DefaultGatePort {
		t.Fatalf("the replica's NetworkPolicy: %+v, %v; want the gate's port only", np, err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, "gf-"+pool+"-deny-ingress", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pool's default deny: %v", err)
	}
}

// checkSyncedPod checks that the Job of job id's running attempt restores
// and uploads its checkpoints in the pod: the server handed the runner the
// pool's storage, credentials and the project's data key, which are in the
// Job's Secret only, and the job's container has the checkpoint volume.
func checkSyncedPod(ctx context.Context, t *testing.T, cs k8sclient.Interface, ns, id string) {
	t.Helper()
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJobID + "=" + id})
	if err != nil || len(jobs.Items) != 1 {
		t.Fatalf("the Job of %s: %v (%d)", id, err, len(jobs.Items))
	}
	job := jobs.Items[0]
	var names []string
	for _, c := range job.Spec.Template.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{kubernetes.ContainerRestore, kubernetes.ContainerCheckpoint}; !slices.Equal(names, want) {
		t.Errorf("init containers %v, want %v", names, want)
	}
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["GPUFLEET_CHECKPOINT_DIR"] != podsync.CheckpointDir {
		t.Errorf("GPUFLEET_CHECKPOINT_DIR = %q, want %s", env["GPUFLEET_CHECKPOINT_DIR"], podsync.CheckpointDir)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var spec podsync.Spec
	if err := json.Unmarshal(sec.Data[podsync.EnvSpec], &spec); err != nil {
		t.Fatalf("the Secret's %s: %v", podsync.EnvSpec, err)
	}
	if ck := spec.Checkpoint; spec.JobID != id || ck == nil || ck.AccessKeyID != s3test.AccessKey || len(ck.DataKey) != 32 || ck.Storage.S3 == nil || ck.Storage.S3.Bucket != "ckpt" {
		t.Errorf("the Secret's sync spec = %+v, want job %s's checkpoint storage, credentials and a 32-byte data key", spec, id)
	}
	raw, _ := json.Marshal(job)
	if strings.Contains(string(raw), s3test.SecretKey) {
		t.Error("the Job holds the storage's secret key")
	}
}

// startHeadless runs `gpufleet server --no-local-agent` and waits until the
// CLI reaches it.
func startHeadless(t *testing.T, dataDir, listen string) *serverProc {
	t.Helper()
	s := &serverProc{t: t, dataDir: dataDir, listen: listen, out: &testutil.SyncBuffer{}}
	s.cmd = exec.Command(binary, "server", "--data-dir", dataDir, "--listen", listen, "--no-local-agent")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = cleanEnv()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	waitFor(t, s, "the server", func() bool {
		if _, err := os.Stat(filepath.Join(dataDir, serverFile)); err != nil {
			return false
		}
		_, err := s.gpufleetErr("nodes", "list")
		return err == nil
	})
	return s
}

// waitFor polls cond every 100 ms for up to 30 s.
func waitFor(t *testing.T, s *serverProc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nserver log:\n%s", what, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling separate processes; bounded by the deadline
	}
}
