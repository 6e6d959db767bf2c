package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
	"github.com/gpufleet/gpufleet/internal/objstore"
)

// Checkpoint sync (docs/storage.md): a replica whose spec carries
// Checkpoint has its checkpoint folder restored from object storage before
// it starts, watched for new LATEST markers while it runs, and uploaded once
// more when it ends, before its end is reported, so that the attempt that
// resumes it elsewhere finds the last checkpoint.
const (
	// finalUploadTimeout bounds the upload after a replica ends; past it
	// the end is reported anyway and the last uploaded checkpoint counts.
	finalUploadTimeout = 10 * time.Minute
)

// ckptState is a replica's checkpoint sync.
type ckptState struct {
	sync     *ckptsync.Syncer
	interval time.Duration
}

// openCheckpoints builds the syncer for spec's checkpoint folder dir. The
// credentials and data key stay in memory.
func (a *Agent) openCheckpoints(ctx context.Context, spec agentapi.ReplicaSpec, dir string) (*ckptState, error) {
	ck := spec.Checkpoint
	s, err := ckptsync.Open(ctx, *ck, ckptsync.Config{JobID: spec.JobID, Attempt: spec.AttemptID, AttemptNumber: spec.Attempt, Dir: dir,
		Clock: a.cfg.Clock, Log: a.log.With("job_id", spec.JobID, "replica_id", spec.ID)})
	if err != nil {
		return nil, err
	}
	every := ck.Interval.D()
	if every <= 0 {
		every = ckptsync.DefaultInterval
	}
	return &ckptState{sync: s, interval: every}, nil
}

// restoreCheckpoint restores the job's latest checkpoint into the
// sandbox's checkpoint folder, handing what arrived to the attempt's user.
func (a *Agent) restoreCheckpoint(ctx context.Context, spec agentapi.ReplicaSpec, sb runtime.Sandbox, log *slog.Logger) (*ckptState, error) {
	ck, err := a.openCheckpoints(ctx, spec, sb.CheckpointDir)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m, ok, err := ck.sync.Restore(ctx)
	if err != nil {
		return nil, err
	}
	if ok {
		log.Info("restored checkpoint", "step", m.Step, "files", len(m.Files), "bytes", m.Bytes(), "took", time.Since(start).Round(time.Millisecond))
	} else {
		log.Info("no checkpoint to restore")
	}
	if sb.User != nil {
		if err := runtime.Own(sb.CheckpointDir, *sb.User); err != nil {
			return nil, err
		}
	}
	return ck, nil
}

// permanentCheckpointError reports whether a restore failure will not
// pass by retrying: the attempt fails rather than being retried elsewhere.
func permanentCheckpointError(err error) bool {
	return errors.Is(err, objstore.ErrAccessDenied) || errors.Is(err, objstore.ErrNoBucket) || errors.Is(err, objstore.ErrCorrupt)
}

// setCheckpoints gives r its checkpoint sync, unless it has one.
func (a *Agent) setCheckpoints(r *replica, ck *ckptState) {
	a.mu.Lock()
	if r.ckpt == nil {
		r.ckpt = ck
	}
	a.mu.Unlock()
	ring(r.wake)
}

// checkpointsOf returns r's checkpoint sync, or nil.
func (a *Agent) checkpointsOf(r *replica) *ckptState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return r.ckpt
}

// watcher runs a replica's checkpoint watch while it runs.
type watcher struct {
	stop context.CancelFunc
	done chan struct{}
}

func startWatch(ctx context.Context, ck *ckptState) *watcher {
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ck.sync.Watch(wctx, ck.interval)
	}()
	return w
}

// end stops the watch and waits for an upload in flight.
func (w *watcher) end() {
	if w != nil {
		w.stop()
		<-w.done
	}
}

// finalUpload uploads what the ended replica left, if it marked a new
// checkpoint since the last upload.
func (a *Agent) finalUpload(ctx context.Context, ck *ckptState, log *slog.Logger) {
	if ck == nil {
		return
	}
	uctx, cancel := context.WithTimeout(ctx, finalUploadTimeout)
	defer cancel()
	m, ok, err := ck.sync.Upload(uctx)
	switch {
	case err != nil:
		log.Error("uploading the replica's last checkpoint; the one uploaded before stays latest", "err", err)
	case ok:
		log.Info("uploaded the replica's last checkpoint", "step", m.Step, "files", len(m.Files), "bytes", m.Bytes())
	}
}

// adoptCheckpoints gives a replica adopted after an agent restart its
// checkpoint sync from the desired set (nothing is restored: it runs).
func (a *Agent) adoptCheckpoints(ctx context.Context, r *replica, spec agentapi.ReplicaSpec) {
	sb, ok, err := supervisor.ReadSandbox(r.dir)
	if err != nil || !ok || sb.CheckpointDir == "" {
		return
	}
	ck, err := a.openCheckpoints(ctx, spec, sb.CheckpointDir)
	if err != nil {
		a.log.Error("opening an adopted replica's checkpoint storage", "replica_id", r.id, "err", err)
		return
	}
	a.setCheckpoints(r, ck)
}

// withCheckpoint adds the time of the last uploaded checkpoint to s.
func withCheckpoint(s agentapi.ReplicaStatus, ck *ckptState) agentapi.ReplicaStatus {
	if ck == nil {
		return s
	}
	if m, ok := ck.sync.Uploaded(); ok {
		t := m.Time
		s.Checkpoint = &t
	}
	return s
}
