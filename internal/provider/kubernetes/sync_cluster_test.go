package kubernetes

import (
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/kubetest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// TestSyncPodOnRealCluster checks a synced replica's pod end to end as far
// as a control plane without kubelets allows: the Job and its Secret are
// accepted by a real kube-apiserver (which validates the native sidecar,
// the subPath mounts and the security contexts), the Job controller makes
// its pod, and then the test plays the kubelet: it runs each sync
// container's command (podsync, what `gpufleet pod VERB` runs) with the
// environment the pod would get, resolved from the Secret the apiserver
// stores, against a real S3 server (versitygw): the datasets arrive
// read-only, the checkpoint an agent uploaded is restored, the job's next
// checkpoint is uploaded when the sidecar is told to stop, and the bucket
// holds no plaintext.
func TestSyncPodOnRealCluster(t *testing.T) {
	kc := kubetest.Shared(t)
	srv := s3test.Start(t)
	ckptRaw := srv.CreateBucket(t, "ckpt")
	srv.CreateBucket(t, "lake")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dataset := map[string]string{"train/00001.txt": "the first shard\n", "train/00002.txt": "the second shard\n", "labels.txt": "cat\ndog\n"}
	for k, v := range dataset {
		if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lake"), Key: aws.String("imagenet/" + k), Body: strings.NewReader(v)}); err != nil {
			t.Fatal(err)
		}
	}

	// The job's checkpoint of step 10, uploaded by its first attempt on an
	// agent node.
	s := withSync(spec("j-podsync", 0, 1, 0))
	s.Checkpoint.Storage.S3.Endpoint, s.Data[0].Storage.S3.Endpoint = srv.Endpoint, srv.Endpoint
	s.Checkpoint.AccessKeyID, s.Checkpoint.SecretAccessKey = s3test.AccessKey, s3test.SecretKey
	s.Data[0].AccessKeyID, s.Data[0].SecretAccessKey = s3test.AccessKey, s3test.SecretKey
	const weights1, weights2 = "PLAINTEXT-WEIGHTS-OF-STEP-10", "PLAINTEXT-WEIGHTS-OF-STEP-20"
	prev := t.TempDir()
	writeFiles(t, prev, map[string]string{"model.pt": weights1, ckptsync.Marker: "step=10"})
	first, err := ckptsync.Open(ctx, *s.Checkpoint, ckptsync.Config{JobID: s.JobID, Attempt: "a1", AttemptNumber: 1, Dir: prev})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := first.Upload(ctx); err != nil || !ok {
		t.Fatalf("seeding step 10: %v %v", ok, err)
	}

	// The second attempt, on a Kubernetes pool.
	attempt := model.AttemptID(s.JobID, 2)
	s.ID, s.AttemptID, s.Attempt, s.Workdir = model.ReplicaID(attempt, 0), attempt, 2, "/work"
	ns := "it-podsync-" + strings.ToLower(rnd(t))
	cs := kc.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings := withDefaults(model.KubernetesPoolSettings{Namespace: ns, SyncImage: testSyncImage})
	plan := jobPlan{pool: "podsync", settings: settings, node: &nodeTarget{id: "v1", models: []string{"NVIDIA-H100-80GB-HBM3"}, capacities: []string{"spot"}}, specs: []agentapi.ReplicaSpec{s}}
	job, _ := plan.build()
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, plan.secret(job), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the apiserver refused the Secret: %v", err)
	}
	if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the apiserver refused the Job: %v", err)
	}
	var pod corev1.Pod
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) > 0 {
			pod = pods.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job controller made no pod: %v", err)
		}
	}
	if len(pod.Spec.InitContainers) != 3 {
		t.Fatalf("pod %s has %d init containers, want 3", pod.Name, len(pod.Spec.InitContainers))
	}

	// The kubelet's part: each volume a folder, each sync container's
	// command run with its environment from the stored Secret.
	vols := map[string]string{volumeData: t.TempDir(), volumeCheckpoint: t.TempDir()}
	run := func(ctx context.Context, c corev1.Container) error {
		if len(c.Command) != 3 || c.Command[0] != "gpufleet" || c.Command[1] != "pod" {
			t.Fatalf("container %s command %q", c.Name, c.Command)
		}
		for _, e := range c.Env {
			ref := e.ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				continue
			}
			sec, err := cs.CoreV1().Secrets(ns).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("container %s: Secret %s: %v", c.Name, ref.SecretKeyRef.Name, err)
			}
			t.Setenv(e.Name, string(sec.Data[ref.SecretKeyRef.Key]))
		}
		ps, err := podsync.FromEnv()
		if err != nil {
			t.Fatal(err)
		}
		dir := vols[c.VolumeMounts[0].Name]
		switch c.Command[2] {
		case "fetch-data":
			return podsync.FetchData(ctx, ps, dir, discard)
		case "restore":
			return podsync.Restore(ctx, ps, dir, discard)
		case "sync":
			return podsync.Sync(ctx, ps, dir, 50*time.Millisecond, discard)
		}
		t.Fatalf("container %s: unknown verb %q", c.Name, c.Command[2])
		return nil
	}
	for _, c := range pod.Spec.InitContainers[:2] {
		if err := run(ctx, c); err != nil {
			t.Fatalf("init container %s: %v", c.Name, err)
		}
	}
	// What the job's container sees at its data mount (subPath).
	main := pod.Spec.Containers[0]
	mnt := main.VolumeMounts[0]
	seen := filepath.Join(vols[mnt.Name], mnt.SubPath)
	for k, v := range dataset {
		got, err := os.ReadFile(filepath.Join(seen, k))
		if err != nil || string(got) != v {
			t.Errorf("dataset file %s at %s = %q, %v; want %q", k, mnt.MountPath, got, err, v)
		}
		if fi, err := os.Stat(filepath.Join(seen, k)); err == nil && fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("dataset file %s is writable (%v)", k, fi.Mode())
		}
	}
	if !mnt.ReadOnly {
		t.Errorf("data mount %+v is not read-only", mnt)
	}
	ckdir := vols[volumeCheckpoint]
	if got, _ := os.ReadFile(filepath.Join(ckdir, "model.pt")); string(got) != weights1 {
		t.Fatalf("restored model.pt = %q, want step 10's", got)
	}

	// The sidecar runs with the job; the job writes step 20 and ends; the
	// kubelet stops the sidecar, which uploads once more.
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(sctx, pod.Spec.InitContainers[2]) }()
	time.Sleep(200 * time.Millisecond)
	writeFiles(t, ckdir, map[string]string{"model.pt": weights2})
	writeFiles(t, ckdir, map[string]string{ckptsync.Marker: "step=20"})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("sidecar: %v", err)
	}
	m, ok, err := first.Latest(ctx)
	if err != nil || !ok || m.Step != 20 || m.AttemptNumber != 2 {
		t.Fatalf("latest after the pod = step %d of attempt %d (%v, %v), want step 20 of attempt 2", m.Step, m.AttemptNumber, ok, err)
	}

	// A reader of the bucket sees ciphertext only.
	filepath.WalkDir(ckptRaw, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, plain := range []string{weights1, weights2, "step=20", s.JobID} {
			if strings.Contains(string(b), plain) {
				t.Errorf("bucket file %s holds plaintext %q", p, plain)
			}
		}
		return nil
	})
}

var discard = slog.New(slog.DiscardHandler)

func rnd(*testing.T) string { return rand.Text()[:6] }

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
