package controller

import (
	"context"
	"os"
	"path/filepath"
	"time"
)

// checkpointMarker is the file a job writes into its checkpoint folder when
// a checkpoint is complete (DESIGN.md §3.5); its modification time is when.
const checkpointMarker = "LATEST"

// watchCheckpoints records a checkpoint for every running job whose marker
// file changed, so "work lost since the last checkpoint" is known for jobs
// that write the marker rather than call POST /v1/jobs/{id}/checkpoints.
// The checkpoint folder is on this machine (the data dir), so a stat per
// running job per tick is all it costs. A marker is dated by its
// modification time, never later than now.
func (c *Controller) watchCheckpoints(ctx context.Context) {
	if c.cfg.CheckpointDir == "" {
		return
	}
	now := c.cfg.Clock.Now()
	due := map[string]time.Time{}
	c.mu.Lock()
	live := map[string]bool{}
	for _, a := range c.st.LiveAttempts() {
		live[a.JobID] = true
		j, ok := c.st.Job(a.JobID)
		if !ok {
			continue
		}
		info, err := os.Stat(filepath.Join(c.cfg.CheckpointDir, j.ID, checkpointMarker))
		if err != nil {
			continue
		}
		mtime := info.ModTime()
		if seen, ok := c.markers[j.ID]; ok && seen.Equal(mtime) {
			continue
		}
		c.markers[j.ID] = mtime
		at := mtime
		if at.After(now) {
			at = now
		}
		if j.LastCheckpoint == nil || at.After(*j.LastCheckpoint) {
			due[j.ID] = at
		}
	}
	for id := range c.markers {
		if !live[id] {
			delete(c.markers, id)
		}
	}
	c.mu.Unlock()
	for id, at := range due {
		if _, err := c.checkpointAt(ctx, id, at); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("recording checkpoint from marker", "job_id", id, "err", err)
		}
	}
}
