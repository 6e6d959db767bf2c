package kubernetes

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/ckptsync"
)

// checkpointPoll is how often the runner reads the latest checkpoint of a
// running replica whose pod syncs them (at least: the spec's interval when
// longer).
var checkpointPoll = 15 * time.Second

// ckptWatch follows the checkpoints a replica's pod uploads, so that the
// runner reports them as an agent does (ReplicaStatus.Checkpoint): the
// scheduler measures the work a preemption would lose from the last
// uploaded checkpoint. It reads the job's latest manifest from the
// storage, one GET per poll.
type ckptWatch struct {
	latest atomic.Pointer[time.Time]
	stop   context.CancelFunc
}

// watchCheckpoints starts following spec's checkpoints; changed is rung
// when a newer one is seen. Stop with stop.
func watchCheckpoints(ctx context.Context, spec agentapi.ReplicaSpec, changed chan struct{}, log *slog.Logger) *ckptWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ckptWatch{stop: cancel}
	every := max(checkpointPoll, spec.Checkpoint.Interval.D())
	go func() {
		read, err := ckptsync.OpenLatest(ctx, *spec.Checkpoint, spec.JobID)
		if err != nil {
			log.Warn("opening the job's checkpoint storage; its uploads are not reported", "job_id", spec.JobID, "err", err)
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m, ok, err := read(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("reading the job's latest checkpoint", "job_id", spec.JobID, "err", err)
			case ok:
				at := m.Time
				if p := w.latest.Load(); p == nil || at.After(*p) {
					w.latest.Store(&at)
					ring(changed)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// checkpointOf is the time of the latest checkpoint w has seen, or nil.
func (w *ckptWatch) checkpointOf() *time.Time {
	if w == nil {
		return nil
	}
	return w.latest.Load()
}
