package controller

import (
	"context"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// checkpointMarker is the file a job writes into its checkpoint folder when
// a checkpoint is complete (DESIGN.md §3.5); its modification time is when.
const checkpointMarker = "LATEST"

// markerStatsPerTick bounds the marker files looked at per tick: with more
// live jobs than that, each job's is looked at every few ticks.
const markerStatsPerTick = 1000

// watchCheckpoints records a checkpoint for every running job whose marker
// file changed, so "work lost since the last checkpoint" is known for jobs
// that write the marker rather than call POST /v1/jobs/{id}/checkpoints.
// The checkpoint folder is on this machine (the data dir), so a stat per
// running job is all it costs, made outside the lock and spread over ticks
// (markerStatsPerTick). A marker is dated by its modification time, never
// later than now.
func (c *Controller) watchCheckpoints(ctx context.Context) {
	if c.cfg.CheckpointDir == "" {
		return
	}
	type job struct {
		id   string
		last *time.Time
	}
	c.mu.Lock()
	c.markerTick++
	rounds := uint64(1 + (c.st.LiveCount()-1)/markerStatsPerTick)
	turn := c.markerTick % rounds
	var look []job
	c.st.EachLiveAttempt(func(a *model.Attempt) {
		if rounds > 1 && jobHash(a.JobID)%rounds != turn {
			return
		}
		if j, ok := c.st.Job(a.JobID); ok {
			look = append(look, job{j.ID, j.LastCheckpoint})
		}
	})
	// Only jobs that wrote a marker are remembered: look each up rather
	// than index every live attempt per tick.
	for id := range c.markers {
		if _, live := c.st.LiveAttempt(id); !live {
			delete(c.markers, id)
		}
	}
	c.mu.Unlock()

	now := c.cfg.Clock.Now()
	seen := map[string]time.Time{}
	due := map[string]time.Time{}
	for _, j := range look {
		info, err := os.Stat(filepath.Join(c.cfg.CheckpointDir, j.id, checkpointMarker))
		if err != nil {
			continue
		}
		seen[j.id] = info.ModTime()
	}
	c.mu.Lock()
	for _, j := range look {
		mtime, ok := seen[j.id]
		if !ok {
			continue
		}
		if last, ok := c.markers[j.id]; ok && last.Equal(mtime) {
			continue
		}
		c.markers[j.id] = mtime
		at := mtime
		if at.After(now) {
			at = now
		}
		if j.last == nil || at.After(*j.last) {
			due[j.id] = at
		}
	}
	c.mu.Unlock()
	for id, at := range due {
		if _, err := c.checkpointAt(ctx, id, at); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("recording checkpoint from marker", "job_id", id, "err", err)
		}
	}
}

// jobHash spreads job ids over watchCheckpoints' rounds.
func jobHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
