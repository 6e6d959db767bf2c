package controller

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/manifest"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/static"
)

const ckptPool = `apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: owned}
spec:
  provider: static
  static:
    machines:
      - {name: box-1, address: "10.0.0.1:7000", gpus: 1xH100, pricePerHour: 2}
  checkpointStorage:
    s3: {bucket: ckpt, prefix: fleet, endpoint: "http://127.0.0.1:9", pathStyle: true, credentialsRef: default/S3_CKPT}
`

// TestDesiredSetCarriesCheckpointSync: a job on a pool with checkpoint
// storage gets, in its rank-0 replica, the storage, the credentials opened
// from credentialsRef and its project's data key, created once, sealed in
// the vault, and not deletable. Without the credentials' secret the replica
// is held back.
func TestDesiredSetCarriesCheckpointSync(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "gpufleet.db")
	owned := static.NewPools(nil, t0)
	h, shutdown, err := startSQLiteController(t, db, func(c *Config) {
		c.PoolsChanged = owned.SetPools
		c.Adopters = map[string]provider.Adopter{static.Name: owned}
	})
	if err != nil {
		t.Fatal(err)
	}
	set, fe := manifest.Parse([]manifest.Source{{Name: "pool.yaml", Data: []byte(ckptPool), Format: manifest.YAML}}, manifest.Checks{})
	if fe != nil {
		t.Fatal(fe)
	}
	if _, err := h.c.ApplyFleet(ctx, set, ApplyOptions{Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Register(ctx, agentapi.Registration{NodeID: "box-1", Name: "box-1", Provider: model.ProviderStatic, GPUs: gpus(1, "H100"), CapacityType: model.Owned}); err != nil {
		t.Fatal(err)
	}
	h.node = "box-1"
	h.submit(cmdSpec(1))
	// No credentials yet: held back.
	for range 3 {
		if resp := h.sync(); len(resp.Replicas) != 0 {
			t.Fatalf("a replica whose storage credentials are missing was sent: %+v", resp.Replicas)
		}
		h.await()
	}
	if _, err := h.c.Vault().PutSecret(ctx, "default", "S3_CKPT", []byte("AKID123:s3cr3t-value")); err != nil {
		t.Fatal(err)
	}
	rs := h.waitDesired(1).Replicas[0]
	ck := rs.Checkpoint
	if ck == nil {
		t.Fatal("the replica carries no checkpoint sync")
	}
	want := &agentapi.CheckpointSync{
		Storage:     model.Storage{S3: &model.S3Storage{Bucket: "ckpt", Prefix: "fleet", Endpoint: "http://127.0.0.1:9", PathStyle: true, CredentialsRef: "default/S3_CKPT"}},
		AccessKeyID: "AKID123", SecretAccessKey: "s3cr3t-value", DataKey: ck.DataKey,
	}
	if d := cmp.Diff(want, ck); d != "" {
		t.Errorf("checkpoint sync (-want +got):\n%s", d)
	}
	if len(ck.DataKey) != 32 {
		t.Errorf("data key of %d bytes, want 32", len(ck.DataKey))
	}
	if again := h.sync().Replicas[0].Checkpoint; again == nil || !bytes.Equal(again.DataKey, ck.DataKey) {
		t.Error("the project's data key changed between syncs")
	}
	if dir := rs.Env["GPUFLEET_CHECKPOINT_DIR"]; dir != "" {
		t.Errorf("GPUFLEET_CHECKPOINT_DIR = %q, want empty: the node's own folder, synced with the storage", dir)
	}
	// An uploaded checkpoint the agent reports is the job's last.
	at := h.clk.Now().Add(-time.Minute)
	h.sync(agentapi.ReplicaStatus{ID: rs.ID, Phase: agentapi.PhaseRunning, StartedAt: h.clk.Now(), Checkpoint: &at})
	if j := mustJob(t, h.c, rs.JobID); j.LastCheckpoint == nil || !j.LastCheckpoint.Equal(at) {
		t.Errorf("job's last checkpoint %v, want the uploaded one's %v", j.LastCheckpoint, at)
	}
	if info := h.c.Vault().Secrets("default"); len(info) != 2 || info[0].Name != model.DataKeySecret {
		t.Errorf("project secrets %+v, want the data key beside S3_CKPT", info)
	}
	if err := h.c.Vault().DeleteSecret(ctx, "default", model.DataKeySecret); !errors.Is(err, ErrConflict) {
		t.Errorf("deleting the data key: %v, want ErrConflict", err)
	}
	// It was committed: a restarted server sends the same key.
	shutdown()
	h, _, err = startSQLiteController(t, db)
	if err != nil {
		t.Fatal(err)
	}
	h.node = "box-1"
	if again := h.waitDesired(1).Replicas[0].Checkpoint; again == nil || !bytes.Equal(again.DataKey, ck.DataKey) {
		t.Error("after a restart the project's data key differs")
	}
}
