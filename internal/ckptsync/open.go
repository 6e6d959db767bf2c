package ckptsync

import (
	"context"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Open returns the Syncer of an attempt's checkpoint folder on what the
// control plane handed its node (agentapi.CheckpointSync): the storage,
// opened with the credentials it carries, and the project's data key.
// cfg's Store and Sealer are set from ck; the credentials and key stay in
// memory. Agents and Kubernetes pods' checkpoint containers (package
// podsync) both open their syncers here.
func Open(ctx context.Context, ck agentapi.CheckpointSync, cfg Config) (*Syncer, error) {
	st, err := objstore.Open(ctx, ck.Storage, objstore.Credentials{AccessKeyID: ck.AccessKeyID, SecretAccessKey: ck.SecretAccessKey})
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint storage %s: %w", ck.Storage.String(), err)
	}
	sl, err := objstore.NewSealer(ck.DataKey)
	if err != nil {
		return nil, fmt.Errorf("checkpoint data key: %w", err)
	}
	cfg.Store, cfg.Sealer = st, sl
	return New(cfg)
}

// OpenLatest returns a reader of job jobID's latest complete checkpoint in
// the storage ck names, for a runner that reports uploads it does not make
// itself (the Kubernetes runner, whose pods upload): ok is false while the
// job has none.
func OpenLatest(ctx context.Context, ck agentapi.CheckpointSync, jobID string) (func(context.Context) (m Manifest, ok bool, err error), error) {
	s, err := Open(ctx, ck, Config{JobID: jobID, Dir: "/"}) // Latest reads no folder
	if err != nil {
		return nil, err
	}
	return s.Latest, nil
}
