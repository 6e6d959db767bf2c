package agent

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/objstore"
	"github.com/gpufleet/gpufleet/internal/s3test"
)

// TestCheckpointsFollowTheJobToAnotherNode: a job checkpoints on node A
// (uploaded when it writes LATEST, and once more after it is stopped, before
// its end is reported); its next attempt on node B, another agent with its
// own folders, starts from that checkpoint. The bucket holds no plaintext,
// and no replica file on disk holds the credentials or the data key.
func TestCheckpointsFollowTheJobToAnotherNode(t *testing.T) {
	srv := s3test.Start(t)
	raw := srv.CreateBucket(t, "ckpt")
	dataKey := bytes.Repeat([]byte{0x42}, 32)
	ck := &agentapi.CheckpointSync{
		Storage:     model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Prefix: "pool", Endpoint: srv.Endpoint, PathStyle: true}},
		AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey,
		DataKey:  dataKey,
		Interval: model.Duration(50 * time.Millisecond),
	}
	latest := func() ckptsync.Manifest {
		st, _ := objstore.Open(context.Background(), ck.Storage, objstore.Credentials{AccessKeyID: ck.AccessKeyID, SecretAccessKey: ck.SecretAccessKey})
		sl, _ := objstore.NewSealer(dataKey)
		s, _ := ckptsync.New(ckptsync.Config{Store: st, Sealer: sl, JobID: "job1", Dir: t.TempDir()})
		m, _, err := s.Latest(context.Background())
		if err != nil {
			t.Fatalf("reading the latest checkpoint: %v", err)
		}
		return m
	}

	// Node A: step 100 while it runs, step 150 when it is stopped.
	cpA := newFakeControlPlane()
	a := shell("job1-a1-r0", `d=$GPUFLEET_CHECKPOINT_DIR
trap 'echo weights-150 > $d/model.pt; echo step=150 > $d/LATEST; exit 0' TERM
echo weights-100 > $d/model.pt; echo step=100 > $d/LATEST; echo ready; sleep 30 & wait`)
	a.Checkpoint = ck
	cpA.setDesired(a)
	dirA := agentDir(t)
	startAgent(t, newTestAgent(t, cpA, dirA))
	waitFor(t, "step 100 uploaded", func() bool { return latest().Step == 100 })
	waitFor(t, "the upload reported", func() bool {
		s, _ := cpA.status(a.ID)
		return s.Checkpoint != nil && s.Checkpoint.Equal(latest().Time)
	})
	a.Stop = true
	cpA.setDesired(a)
	waitPhase(t, cpA, a.ID, agentapi.PhaseExited)
	if m := latest(); m.Step != 150 || m.Attempt != "job1-a1" {
		t.Fatalf("when A reported the end, the latest checkpoint was step %d of %q; want 150 of job1-a1", m.Step, m.Attempt)
	}

	// Once the server has A's end, A removes the attempt's folder.
	ckDir := filepath.Join(dirA, "work", workCheckpoints, "job1-a1")
	if _, err := os.Stat(filepath.Join(ckDir, "LATEST")); err != nil {
		t.Fatalf("the attempt's checkpoint folder: %v", err)
	}
	cpA.setDesired()
	waitFor(t, "A's checkpoint folder removed", func() bool { _, err := os.Stat(ckDir); return os.IsNotExist(err) })

	// Node B resumes from it.
	cpB := newFakeControlPlane()
	b := shell("job1-a2-r0", `cat $GPUFLEET_CHECKPOINT_DIR/LATEST $GPUFLEET_CHECKPOINT_DIR/model.pt`)
	b.AttemptID, b.Attempt, b.Checkpoint = "job1-a2", 2, ck
	cpB.setDesired(b)
	dirB := agentDir(t)
	startAgent(t, newTestAgent(t, cpB, dirB))
	waitPhase(t, cpB, b.ID, agentapi.PhaseExited)
	if log, _ := cpB.endLog(b.ID); string(log.data) != "step=150\nweights-150\n" {
		t.Errorf("B's replica read %q from its checkpoint folder, want step 150", log.data)
	}

	for _, root := range []string{raw} {
		filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if data, _ := os.ReadFile(p); bytes.Contains(data, []byte("weights-")) || bytes.Contains(data, []byte("step=1")) {
					t.Errorf("bucket file %s holds plaintext", p)
				}
			}
			return nil
		})
	}
	for _, root := range []string{dirA, dirB} {
		filepath.WalkDir(filepath.Join(root, replicasDir), func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				data, _ := os.ReadFile(p)
				if bytes.Contains(data, []byte(s3test.SecretKey)) || strings.Contains(string(data), "dataKey") {
					t.Errorf("replica file %s holds the storage secret or the data key", p)
				}
			}
			return nil
		})
	}
}

// TestCheckpointRestoreFailureEndsTheReplica: wrong credentials and a
// missing bucket fail the attempt before it starts, unreachable storage
// loses it (retried elsewhere), each with the object named and no secret.
func TestCheckpointRestoreFailureEndsTheReplica(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "ckpt")
	for name, tc := range map[string]struct {
		bucket, endpoint, secret string
		phase                    agentapi.Phase
		says                     string
	}{
		"wrong credentials": {"ckpt", srv.Endpoint, "wrong-secret", agentapi.PhaseExited, "access denied"},
		"missing bucket":    {"gone", srv.Endpoint, s3test.SecretKey, agentapi.PhaseExited, "bucket does not exist"},
		"unreachable":       {"ckpt", "http://127.0.0.1:1", s3test.SecretKey, agentapi.PhaseLost, "unreachable"},
	} {
		t.Run(name, func(t *testing.T) {
			cp := newFakeControlPlane()
			r := shell("job1-a1-r0", `echo must-not-run`)
			r.Checkpoint = &agentapi.CheckpointSync{
				Storage:     model.Storage{S3: &model.S3Storage{Bucket: tc.bucket, Endpoint: tc.endpoint, PathStyle: true}},
				AccessKeyID: s3test.AccessKey, SecretAccessKey: tc.secret,
				DataKey: bytes.Repeat([]byte{1}, 32),
			}
			cp.setDesired(r)
			startAgent(t, newTestAgent(t, cp, agentDir(t)))
			s := waitPhase(t, cp, r.ID, tc.phase)
			if !strings.Contains(s.Reason, tc.says) || !strings.Contains(s.Reason, "latest") || s.ExitCode != nil {
				t.Errorf("reason %q exit %v; want %q naming the object, no exit code", s.Reason, s.ExitCode, tc.says)
			}
			if strings.Contains(s.Reason, tc.secret) {
				t.Errorf("reason reveals the secret: %q", s.Reason)
			}
		})
	}
}
