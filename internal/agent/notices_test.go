package agent

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// fakeNotices reports what the test sends on its channel.
type fakeNotices chan []agentapi.Notice

func (f fakeNotices) Watch(ctx context.Context, report func([]agentapi.Notice)) {
	for {
		select {
		case <-ctx.Done():
			return
		case ns := <-f:
			report(ns)
		}
	}
}

func (f *fakeControlPlane) syncsWithNotices() [][]agentapi.Notice {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]agentapi.Notice
	for _, s := range f.syncs {
		if len(s.Notices) > 0 {
			out = append(out, s.Notices)
		}
	}
	return out
}

func TestCloudNoticeRidesOnEverySync(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	src := make(fakeNotices)
	// A long poll far longer than the test waits: the notice must cut it.
	a := newTestAgent(t, cp, agentDir(t), func(c *Config) { c.SyncWait = time.Minute; c.Notices = src })
	startAgent(t, a)
	waitFor(t, "first sync", func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return len(cp.syncs) > 0
	})
	n := agentapi.Notice{Kind: agentapi.NoticeInterruption, Source: "test", InstanceID: "i-0123456789abcdef0",
		IssuedAt: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), Deadline: time.Date(2026, 12, 2, 0, 2, 0, 0, time.UTC), Action: "terminate"}
	sent := time.Now()
	src <- []agentapi.Notice{n}
	waitFor(t, "a sync with the notice", func() bool { return len(cp.syncsWithNotices()) > 0 })
	if d := time.Since(sent); d > 30*time.Second {
		t.Errorf("the notice reached the server after %v; it should cut the minute-long poll short", d)
	}
	if diff := cmp.Diff([]agentapi.Notice{n}, cp.syncsWithNotices()[0]); diff != "" {
		t.Errorf("notices on the sync (-want +got):\n%s", diff)
	}
	// Level-triggered: the next sync (a replica change wakes it) repeats it.
	cp.setDesired(shell("r1", "exit 0"))
	waitPhase(t, cp, "r1", agentapi.PhaseExited)
	waitFor(t, "a second sync with the notice", func() bool { return len(cp.syncsWithNotices()) > 1 })
}
