package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// poolStorageLocked is the checkpoint storage of the pool of node id, or
// nil. Callers hold c.mu.
func (c *Controller) poolStorageLocked(nodeID string) *model.Storage {
	n, ok := c.st.Node(nodeID)
	if !ok || n.Pool == "" {
		return nil
	}
	for _, p := range c.fleet.pools {
		if p.Name == n.Pool {
			return p.Spec.CheckpointStorage
		}
	}
	return nil
}

// checkpointStorageLocked is the storage r syncs its job's checkpoints
// with: its pool's, when r is rank 0 (the rank that writes checkpoints);
// nil otherwise. Callers hold c.mu.
func (c *Controller) checkpointStorageLocked(r model.Replica) *model.Storage {
	if r.Rank != 0 {
		return nil
	}
	return c.poolStorageLocked(r.NodeID)
}

// observeCheckpointLocked records the checkpoint an agent reports
// uploaded for job id (ReplicaStatus.Checkpoint), so that work lost by
// preempting the job is measured from its last uploaded checkpoint. The
// changed job joins b. Callers hold c.mu.
func (c *Controller) observeCheckpointLocked(id string, at *time.Time, b *store.Batch) {
	if at == nil {
		return
	}
	j, ok := c.st.Job(id)
	if !ok || j.State.Terminal() || (j.LastCheckpoint != nil && !at.After(*j.LastCheckpoint)) {
		return
	}
	if now := c.cfg.Clock.Now(); at.After(now) {
		t := now
		at = &t
	}
	j = j.Clone()
	t := *at
	j.LastCheckpoint = &t
	j.Version++
	c.st.PutJob(j)
	b.Jobs = append(b.Jobs, j)
}

// checkpointSyncLocked is what the agent of r's node needs to sync the
// job's checkpoints with its pool's storage (docs/storage.md), or nil: the
// storage, the credentials opened from its credentialsRef, and the job's
// project's data key, created (sealed, in the vault, committed before the
// desired set is sent) on first use. Callers hold c.mu.
func (c *Controller) checkpointSyncLocked(job *model.Job, r model.Replica) (*agentapi.CheckpointSync, error) {
	st := c.checkpointStorageLocked(r)
	if st == nil {
		return nil, nil
	}
	if c.cfg.Keyring == nil {
		return nil, fmt.Errorf("checkpoint storage %s: sealing checkpoints needs a data key: %w", st, ErrNoKeyring)
	}
	ck := &agentapi.CheckpointSync{Storage: *st}
	if st.S3 != nil && st.S3.CredentialsRef != "" {
		project, name, _ := st.S3.CredentialsRef.Split()
		v, err := c.openSecretLocked(project, name)
		if err != nil {
			return nil, fmt.Errorf("credentials of checkpoint storage %s: %w", st, err)
		}
		id, secret, ok := strings.Cut(strings.TrimSpace(v), ":")
		if !ok || id == "" || secret == "" {
			return nil, fmt.Errorf("credentials of checkpoint storage %s: secret %s must be ACCESS_KEY_ID:SECRET_ACCESS_KEY", st, st.S3.CredentialsRef)
		}
		ck.AccessKeyID, ck.SecretAccessKey = id, secret
	}
	key, err := c.dataKeyLocked(job.Project)
	if err != nil {
		return nil, err
	}
	ck.DataKey = key
	return ck, nil
}

// openSecretLocked opens a project's secret from the vault.
func (c *Controller) openSecretLocked(project, name string) (string, error) {
	v, held, opened := c.vault.Value(project, name)
	switch {
	case !held:
		return "", fmt.Errorf("secret %s of project %s: %w", name, project, ErrNotFound)
	case !opened:
		return "", fmt.Errorf("opening secret %s of project %s: %w", name, project, errSecretUnavailable)
	}
	return v, nil
}

// dataKeyLocked returns project's data key, creating it when it has none
// (vault.DataKey): Sync's barrier makes a new key durable before any agent
// receives it. Callers hold c.mu.
func (c *Controller) dataKeyLocked(project string) ([]byte, error) {
	return c.vault.DataKey(project)
}
