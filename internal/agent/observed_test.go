package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// TestObservedAtIsTheLookNotTheSend: a running replica's ObservedAt is when
// the agent last saw its process alive. While the replica's tending is
// stuck (its log shipment hangs on a server that does not answer) the
// agent goes on syncing, and its syncs say "running" with the last look's
// time, not their own; an end that happens meanwhile is reported, once
// noticed, with an end no earlier than that look.
func TestObservedAtIsTheLookNotTheSend(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	gate := filepath.Join(t.TempDir(), "gate")
	spec := shell("r1", `while [ ! -e "$GATE" ]; do echo tick; sleep 0.02; done`)
	spec.Env["GATE"] = gate
	cp.setDesired(spec)
	startAgent(t, newTestAgent(t, cp, agentDir(t)))

	first := waitPhase(t, cp, "r1", agentapi.PhaseRunning)
	waitFor(t, "a sync with a later look", func() bool {
		s, _ := cp.status("r1")
		return first.ObservedAt != nil && s.ObservedAt != nil && s.ObservedAt.After(*first.ObservedAt)
	})

	release := cp.holdLogs()
	waitFor(t, "the replica's log shipment to hang", func() bool { return cp.heldLogs() > 0 })
	stuck := time.Now()
	// The first sync after this may have been built before the hang; the
	// three after it were not. Each waits up to SyncWait (1 s): they span
	// two seconds past the last look.
	from := cp.syncCount() + 1
	waitFor(t, "three syncs while the replica's tending is stuck", func() bool { return cp.syncCount() >= from+3 })
	touch(t, gate) // the replica ends; nobody looks
	late := cp.syncCount()
	waitFor(t, "two more syncs", func() bool { return cp.syncCount() >= late+2 })

	var seen time.Time
	for i, req := range cp.syncsSince(from) {
		if len(req.Statuses) != 1 || req.Statuses[0].Phase != agentapi.PhaseRunning || req.Statuses[0].ObservedAt == nil {
			t.Fatalf("sync %d after the hang reported %+v, want r1 running with when it was seen", i, req.Statuses)
		}
		at := *req.Statuses[0].ObservedAt
		if at.After(stuck) {
			t.Errorf("sync %d after the hang says r1 was seen alive at %s, after its tending hung (%s)", i, at.Format(time.StampMicro), stuck.Format(time.StampMicro))
		}
		if i > 0 && !at.Equal(seen) {
			t.Errorf("sync %d says r1 was seen at %s, sync %d at %s: no look was made between them", i, at.Format(time.StampMicro), i-1, seen.Format(time.StampMicro))
		}
		seen = at
	}

	release()
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if got.EndedAt == nil || got.EndedAt.Before(seen) {
		t.Errorf("r1 ended at %v, before it was last seen alive (%s)", got.EndedAt, seen.Format(time.StampMicro))
	}
	if got.ObservedAt != nil {
		t.Errorf("an exited replica's report carries ObservedAt %s", got.ObservedAt)
	}
}
