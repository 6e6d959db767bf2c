package kubernetes

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/podsync"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

const testSyncImage = "registry.example/gpufleet:test"

// Secret material a synced replica carries: none of it may appear in the
// Job, and only the sync containers may reference it.
const (
	testAccessKey = "AKIASYNCTESTKEY"
	testSecretKey = "sync-secret-access-key-value"
)

var testDataKey = bytes.Repeat([]byte{0x5a}, 32)

// withSync gives s checkpoint storage and one dataset, as the controller
// hands them to a node of a pool with checkpointStorage.
func withSync(s agentapi.ReplicaSpec) agentapi.ReplicaSpec {
	st := model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Endpoint: "http://127.0.0.1:1", Region: "us-east-1", PathStyle: true}}
	s.Checkpoint = &agentapi.CheckpointSync{Storage: st, AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey, DataKey: testDataKey}
	ds := model.Storage{S3: &model.S3Storage{Bucket: "lake", Prefix: "imagenet", Endpoint: "http://127.0.0.1:1", Region: "us-east-1", PathStyle: true}}
	s.Data = []agentapi.DataSync{{Field: "spec.data[0]", Source: "storage:lake/imagenet", Path: "data/imagenet", Digest: "d1", Storage: ds,
		AccessKeyID: testAccessKey, SecretAccessKey: testSecretKey}}
	return s
}

func TestSyncContainers(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage}, h100("n1").obj())
	h.run()
	s := withSync(withSecrets(spec("j-sync", 0, 1, 0)))
	s.Workdir = "/work"
	h.cp.want(h.node, s)
	job := h.job("gf-j-sync-a1-r0")

	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{testAccessKey, testSecretKey, string(testDataKey)} {
		if strings.Contains(string(raw), v) {
			t.Errorf("the Job holds secret value %q", v)
		}
	}
	pod := job.Spec.Template.Spec
	var names []string
	for _, c := range pod.InitContainers {
		names = append(names, c.Name)
		if c.Image != testSyncImage || c.SecurityContext == nil || c.SecurityContext.RunAsNonRoot == nil || !*c.SecurityContext.RunAsNonRoot {
			t.Errorf("init container %s: image %q, security context %+v", c.Name, c.Image, c.SecurityContext)
		}
		ref := c.Env[0].ValueFrom
		if c.Env[0].Name != podsync.EnvSpec || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != job.Name || ref.SecretKeyRef.Key != podsync.EnvSpec {
			t.Errorf("init container %s env = %+v, want %s from Secret %s", c.Name, c.Env, podsync.EnvSpec, job.Name)
		}
	}
	if diff := cmp.Diff([]string{ContainerData, ContainerRestore, ContainerCheckpoint}, names); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	if rp := pod.InitContainers[2].RestartPolicy; rp == nil || *rp != corev1.ContainerRestartPolicyAlways {
		t.Errorf("checkpoint container restart policy = %v, want Always (a native sidecar that outlives the restore and uploads at the end)", rp)
	}
	main := pod.Containers[0]
	for _, e := range main.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == podsync.EnvSpec {
			t.Errorf("the job's container references %s", podsync.EnvSpec)
		}
	}
	env := map[string]string{}
	for _, e := range main.Env {
		env[e.Name] = e.Value
	}
	if env["GPUFLEET_CHECKPOINT_DIR"] != podsync.CheckpointDir || env["GPUFLEET_DATA_DIR"] != "/work" {
		t.Errorf("GPUFLEET_CHECKPOINT_DIR=%q GPUFLEET_DATA_DIR=%q", env["GPUFLEET_CHECKPOINT_DIR"], env["GPUFLEET_DATA_DIR"])
	}
	wantMounts := []corev1.VolumeMount{
		{Name: volumeData, MountPath: "/work/data/imagenet", SubPath: "0", ReadOnly: true},
		{Name: volumeCheckpoint, MountPath: podsync.CheckpointDir},
	}
	if diff := cmp.Diff(wantMounts, main.VolumeMounts); diff != "" {
		t.Errorf("the job's mounts (-want +got):\n%s", diff)
	}

	var sec *corev1.Secret
	eventually(t, "the Job's Secret", func() bool {
		sec, err = h.cs.CoreV1().Secrets(DefaultNamespace).Get(bg, job.Name, metav1.GetOptions{})
		return err == nil
	})
	var got podsync.Spec
	if err := json.Unmarshal(sec.Data[podsync.EnvSpec], &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*podsync.Of(s), got); diff != "" {
		t.Errorf("the Secret's sync spec (-want +got):\n%s", diff)
	}

	p := podOf(job, 0, "n1", corev1.PodSucceeded)
	h.createPod(exited(p, 0))
	h.waitPhase(s.ID, agentapi.PhaseExited)
	eventually(t, "the Secret (credentials, data key) deleted with the attempt", func() bool { return h.secretGone(job.Name) })
}

func TestSyncNeedsTheSyncImage(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{}, h100("n1").obj())
	h.run()
	s := withSync(spec("j-nosync", 0, 1, 0))
	h.cp.want(h.node, s)
	st := h.waitPhase(s.ID, agentapi.PhaseExited)
	if !strings.Contains(st.Reason, "kubernetes.syncImage") {
		t.Errorf("reason = %q, want it to name kubernetes.syncImage", st.Reason)
	}
}

func TestFolderStorageRefused(t *testing.T) {
	s := withSync(spec("j", 0, 1, 0))
	s.Data[0].Storage = model.Storage{Path: "/mnt/lake/imagenet"}
	got := refusal(s, model.KubernetesPoolSettings{SyncImage: testSyncImage})
	if !strings.Contains(got, "spec.data[0].source storage:lake/imagenet") || !strings.Contains(got, "folder") {
		t.Errorf("refusal = %q, want the field and why", got)
	}
	s = withSync(spec("j", 0, 1, 0))
	s.Checkpoint.Storage = model.Storage{Path: "/mnt/ckpt"}
	if got := refusal(s, model.KubernetesPoolSettings{SyncImage: testSyncImage}); !strings.Contains(got, "/mnt/ckpt") {
		t.Errorf("refusal = %q, want the folder named", got)
	}
}

// A failed sync container ends the replica with its message: which
// container, its exit code and its last words.
func TestInitContainerFailureIsTheReason(t *testing.T) {
	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage}, h100("n1").obj())
	h.run()
	s := withSync(spec("j-initfail", 0, 1, 0))
	h.cp.want(h.node, s)
	job := h.job("gf-j-initfail-a1-r0")
	p := podOf(job, 0, "n1", corev1.PodFailed)
	msg := `gpufleet: spec.data[0].source storage:lake/imagenet: listing: list s3://lake/imagenet/: access denied (check the storage's credentials)`
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: ContainerData, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: msg}}}}
	h.createPod(p)
	st := h.waitPhase(s.ID, agentapi.PhaseExited)
	if !strings.Contains(st.Reason, "init container "+ContainerData+" exited 1") || !strings.Contains(st.Reason, "spec.data[0].source") {
		t.Errorf("reason = %q, want the container and its message", st.Reason)
	}
}

func TestCheckPoolNeedsSyncImage(t *testing.T) {
	ckpt := &model.Storage{S3: &model.S3Storage{Bucket: "ckpt"}}
	fe := CheckPool(&model.NodePoolSpec{Provider: Name, CheckpointStorage: ckpt}, "spec", nil)
	if !strings.Contains(fe.Error(), "spec.kubernetes.syncImage") {
		t.Errorf("errors = %v, want spec.kubernetes.syncImage", fe)
	}
	fe = CheckPool(&model.NodePoolSpec{Provider: Name, CheckpointStorage: &model.Storage{Path: "/mnt/c"}, Kubernetes: &model.KubernetesPoolSettings{SyncImage: testSyncImage}}, "spec", nil)
	if !strings.Contains(fe.Error(), "spec.checkpointStorage.path") {
		t.Errorf("errors = %v, want spec.checkpointStorage.path", fe)
	}
	if fe := CheckPool(&model.NodePoolSpec{Provider: Name, CheckpointStorage: ckpt, Kubernetes: &model.KubernetesPoolSettings{SyncImage: testSyncImage}}, "spec", nil); len(fe) != 0 {
		t.Errorf("a valid pool: %v", fe)
	}
}

// The runner reports the checkpoints a replica's pod uploads, as an agent
// reports its own uploads: the scheduler measures lost work from them.
func TestRunnerReportsUploadedCheckpoints(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	defer func(d time.Duration) { checkpointPoll = d }(checkpointPoll)
	checkpointPoll = 100 * time.Millisecond

	s := withSync(spec("j-ckreport", 0, 1, 0))
	s.Data = nil
	s.Checkpoint.Storage.S3.Endpoint = srv.Endpoint
	s.Checkpoint.AccessKeyID, s.Checkpoint.SecretAccessKey = s3test.AccessKey, s3test.SecretKey
	// What the pod's sidecar does: upload to the job's place.
	dir := t.TempDir()
	up, err := ckptsync.Open(bg, *s.Checkpoint, ckptsync.Config{JobID: s.JobID, Attempt: s.AttemptID, AttemptNumber: 1, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	upload := func(step string) time.Time {
		writeFiles(t, dir, map[string]string{"model.pt": "weights " + step, ckptsync.Marker: step})
		m, ok, err := up.Upload(bg)
		if err != nil || !ok {
			t.Fatalf("upload %s: %v %v", step, ok, err)
		}
		return m.Time
	}
	first := upload(`{"step": 10, "time": "2026-12-06T10:00:00Z"}`)

	h := newHarness(t, model.KubernetesPoolSettings{SyncImage: testSyncImage}, h100("n1").obj())
	h.run()
	h.cp.want(h.node, s)
	job := h.job("gf-j-ckreport-a1-r0")
	h.createPod(podOf(job, 0, "n1", corev1.PodRunning))
	reported := func(want time.Time) {
		t.Helper()
		eventually(t, "checkpoint "+want.String()+" reported", func() bool {
			c := h.cp.status(s.ID).Checkpoint
			return c != nil && c.Equal(want)
		})
	}
	reported(first)
	reported(upload(`{"step": 20, "time": "2026-12-06T11:00:00Z"}`))
}
