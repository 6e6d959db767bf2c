package podsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/datacache"
)

// EnvSpec is the environment variable holding a pod's Spec as JSON.
const EnvSpec = "GPUFLEET_SYNC"

// Where the volumes are mounted in the sync containers; the job's
// container sees the checkpoint volume at CheckpointDir too.
const (
	CheckpointDir = "/gpufleet/checkpoint"
	DataDir       = "/gpufleet/data"
)

// FinalUploadTimeout bounds the upload after the job's container ended
// (the pod's termination grace period may end it sooner).
const FinalUploadTimeout = 10 * time.Minute

// Spec is what a pod's sync containers need of the attempt. It holds
// secrets (credentials, the data key): it travels only in the attempt's
// Secret.
type Spec struct {
	JobID     string `json:"jobId"`
	AttemptID string `json:"attemptId"`
	Attempt   int    `json:"attempt"`
	Project   string `json:"project,omitempty"`
	// Checkpoint, when set, is the checkpoint sync of the job.
	Checkpoint *agentapi.CheckpointSync `json:"checkpoint,omitempty"`
	// Data are the job's datasets, in spec.data order.
	Data []agentapi.DataSync `json:"data,omitempty"`
}

// Of returns the Spec of replica spec (nil when it syncs nothing).
func Of(spec agentapi.ReplicaSpec) *Spec {
	if spec.Checkpoint == nil && len(spec.Data) == 0 {
		return nil
	}
	return &Spec{JobID: spec.JobID, AttemptID: spec.AttemptID, Attempt: spec.Attempt, Project: spec.Project, Checkpoint: spec.Checkpoint, Data: spec.Data}
}

// DataSubPath is dataset i's folder in the data volume.
func DataSubPath(i int) string { return strconv.Itoa(i) }

// FromEnv reads the Spec from EnvSpec.
func FromEnv() (Spec, error) {
	v := os.Getenv(EnvSpec)
	if v == "" {
		return Spec{}, fmt.Errorf("%s is not set (this command runs in a gpufleet pod's sync container)", EnvSpec)
	}
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", EnvSpec, err)
	}
	if s.JobID == "" {
		return Spec{}, fmt.Errorf("%s: no jobId", EnvSpec)
	}
	return s, nil
}

func (s Spec) syncer(ctx context.Context, dir string, log *slog.Logger) (*ckptsync.Syncer, error) {
	if s.Checkpoint == nil {
		return nil, errors.New("the attempt has no checkpoint storage")
	}
	return ckptsync.Open(ctx, *s.Checkpoint, ckptsync.Config{JobID: s.JobID, Attempt: s.AttemptID, AttemptNumber: s.Attempt, Dir: dir, Log: log})
}

// Restore restores the job's latest checkpoint into dir and lets the
// job's container, whatever user it runs as, read and replace it.
func Restore(ctx context.Context, s Spec, dir string, log *slog.Logger) error {
	sy, err := s.syncer(ctx, dir, log)
	if err != nil {
		return err
	}
	start := time.Now()
	m, ok, err := sy.Restore(ctx)
	if err != nil {
		return err
	}
	if ok {
		log.Info("restored checkpoint", "job_id", s.JobID, "step", m.Step, "files", len(m.Files), "bytes", m.Bytes(), "took", time.Since(start).Round(time.Millisecond))
	} else {
		log.Info("no checkpoint to restore", "job_id", s.JobID)
	}
	return share(dir)
}

// Sync uploads each new checkpoint the job marks in dir, looking every
// interval (0: the Spec's, else ckptsync.DefaultInterval), until ctx ends
// (the kubelet's SIGTERM once the job's container ended, or the pod's
// deletion), then once more. The checkpoint the restore container put
// in dir is not sent again.
func Sync(ctx context.Context, s Spec, dir string, interval time.Duration, log *slog.Logger) error {
	sy, err := s.syncer(ctx, dir, log)
	if err != nil {
		return err
	}
	if err := sy.Adopt(ctx); err != nil && ctx.Err() == nil {
		log.Warn("reading the latest checkpoint", "job_id", s.JobID, "err", err)
	}
	if interval <= 0 {
		interval = s.Checkpoint.Interval.D()
	}
	if interval <= 0 {
		interval = ckptsync.DefaultInterval
	}
	sy.Watch(ctx, interval)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinalUploadTimeout)
	defer cancel()
	m, ok, err := sy.Upload(uctx)
	switch {
	case err != nil:
		return fmt.Errorf("uploading the last checkpoint (the one uploaded before stays latest): %w", err)
	case ok:
		log.Info("uploaded the last checkpoint", "job_id", s.JobID, "step", m.Step, "files", len(m.Files), "bytes", m.Bytes())
	}
	return nil
}

// FetchData fetches each dataset of s into root/DataSubPath(i), verified
// (datacache.Fetch) and read-only. Errors name the dataset's field and
// source, and the object at fault.
func FetchData(ctx context.Context, s Spec, root string, log *slog.Logger) error {
	for i, d := range s.Data {
		start := time.Now()
		ds, err := datacache.OpenDataset(ctx, s.Project, d)
		if err != nil {
			return err
		}
		dir := filepath.Join(root, DataSubPath(i))
		if err := os.RemoveAll(dir); err != nil { // a previous try of this init container
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s.path %s: %w", d.Field, d.Path, err)
		}
		last := time.Now()
		err = datacache.Fetch(ctx, ds, dir, datacache.FetchOptions{Progress: func(done, total int64) {
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				log.Info("fetching data", "source", d.Source, "done", done, "total", total)
			}
		}})
		if err != nil {
			return err
		}
		if err := datacache.ReadOnlyTree(dir); err != nil {
			return fmt.Errorf("%s.source %s: %w", d.Field, d.Source, err)
		}
		log.Info("dataset ready", "source", d.Source, "path", d.Path, "objects", len(ds.Objects), "bytes", ds.Size(), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// share lets any user of the pod read and replace the restored tree: the
// job's container may run as another user than the restore container, and
// the volume is the pod's own.
func share(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		mode := fs.FileMode(0o666)
		if d.IsDir() {
			mode = 0o777
		}
		return os.Chmod(p, mode)
	})
}
