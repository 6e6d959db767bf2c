package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/archive"
)

// slowArchives is a fake control plane whose archive fetches are slow: each
// is held until release is closed, or, with honourCtx, until the caller's
// context ends (as the HTTP client does).
type slowArchives struct {
	*fakeControlPlane
	release   chan struct{}
	honourCtx bool

	mu                           sync.Mutex
	calls, inFlight, maxInFlight int
}

func (s *slowArchives) FetchArchive(ctx context.Context, digest string) (io.ReadCloser, error) {
	s.mu.Lock()
	s.calls++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	done := ctx.Done()
	if !s.honourCtx {
		done = nil
	}
	select {
	case <-s.release:
	case <-done:
		return nil, ctx.Err()
	}
	return s.fakeControlPlane.FetchArchive(ctx, digest)
}

// counts returns the fetches so far, those in flight, and the most in
// flight at once.
func (s *slowArchives) counts() (calls, inFlight, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.inFlight, s.maxInFlight
}

// packedArchive packs a one-file folder and returns its content address and
// bytes.
func packedArchive(t *testing.T) (string, []byte) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "train.sh"), []byte("echo hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := archive.Pack(src, &buf, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return archive.DigestPrefix + sum, buf.Bytes()
}

// archived returns n replicas that run from the uploaded archive digest.
func archived(n int, digest string) []agentapi.ReplicaSpec {
	specs := make([]agentapi.ReplicaSpec, n)
	for i := range specs {
		specs[i] = shell(fmt.Sprintf("r%03d", i), "sh train.sh")
		specs[i].AttemptID = fmt.Sprintf("job1-a%d", i)
		specs[i].Archive = digest
	}
	return specs
}

// TestShutdownStopsLaunching: an agent told to stop while it launches a
// large desired set starts no more replicas, whether the launches in flight
// end with the stop (a fetch that honours its context) or outlive it (one
// that does not: Run returns after launchWait all the same, and the launch
// starts nothing when it ends). Nothing it prepared is left to adopt.
func TestShutdownStopsLaunching(t *testing.T) {
	t.Parallel()
	for name, honourCtx := range map[string]bool{"fetches end with the stop": true, "fetches outlive the stop": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			digest, data := packedArchive(t)
			cp := &slowArchives{fakeControlPlane: newFakeControlPlane(), release: make(chan struct{}), honourCtx: honourCtx}
			cp.archives = map[string][]byte{digest: data}
			released := sync.OnceFunc(func() { close(cp.release) })
			t.Cleanup(released)
			dir := agentDir(t)
			a := newTestAgent(t, cp, dir)
			a.launchWait = 0 // Run must not wait on a launch that outlives the stop
			const n = 40
			cp.setDesired(archived(n, digest)...)
			stop := startAgent(t, a)
			waitFor(t, "a launch in flight", func() bool { _, inFlight, _ := cp.counts(); return inFlight > 0 })

			stop() // fails the test if Run does not return while a fetch is held
			released()
			a.launching.Wait()

			// Every fetch was in flight before the stop, each holding a
			// launch slot; none began after it.
			if calls, _, _ := cp.counts(); calls > maxLaunches {
				t.Errorf("%d of %d replicas fetched their archive; want at most the %d in flight when the agent stopped", calls, n, maxLaunches)
			}
			entries, err := os.ReadDir(filepath.Join(dir, replicasDir))
			if err != nil || len(entries) != 0 {
				t.Errorf("replica directories after the stop = %d (%v); want none started or left to adopt", len(entries), err)
			}
		})
	}
}

// TestStopWhileLaunching: a replica the server stops, or drops from the
// desired set, while it is being launched is never started; one stopped
// is reported stopped.
func TestStopWhileLaunching(t *testing.T) {
	t.Parallel()
	for name, change := range map[string]func(spec agentapi.ReplicaSpec) []agentapi.ReplicaSpec{
		"stopped": func(spec agentapi.ReplicaSpec) []agentapi.ReplicaSpec {
			spec.Stop = true
			return []agentapi.ReplicaSpec{spec}
		},
		"dropped": func(agentapi.ReplicaSpec) []agentapi.ReplicaSpec { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			digest, data := packedArchive(t)
			cp := &slowArchives{fakeControlPlane: newFakeControlPlane(), release: make(chan struct{}), honourCtx: true}
			cp.archives = map[string][]byte{digest: data}
			released := sync.OnceFunc(func() { close(cp.release) })
			t.Cleanup(released)
			dir := agentDir(t)
			a := newTestAgent(t, cp, dir)
			spec := archived(1, digest)[0]
			cp.setDesired(spec)
			startAgent(t, a)
			waitFor(t, "the launch in flight", func() bool { _, inFlight, _ := cp.counts(); return inFlight > 0 })
			cp.setDesired(change(spec)...)
			waitFor(t, "the agent to take the change", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				p := a.starting[spec.ID]
				return p != nil && p.stop
			})
			released()
			a.launching.Wait()
			if name == "stopped" {
				got := waitPhase(t, cp.fakeControlPlane, spec.ID, agentapi.PhaseExited)
				if got.Reason != agentapi.ReasonStopped {
					t.Errorf("reported %s %q, want exited %q", got.Phase, got.Reason, agentapi.ReasonStopped)
				}
			}
			entries, err := os.ReadDir(filepath.Join(dir, replicasDir))
			if err != nil || len(entries) != 0 {
				t.Errorf("replica directories = %d (%v); want the replica never started", len(entries), err)
			}
		})
	}
}

// TestAgentSyncsWhileLaunchingABurst: while a desired set of 500 replicas
// whose launches are slow starts, the agent launches at most maxLaunches at
// once and keeps syncing (its heartbeat), reporting how many are still
// starting, so the server never takes the busy node for lost.
func TestAgentSyncsWhileLaunchingABurst(t *testing.T) {
	t.Parallel()
	cp := &slowArchives{fakeControlPlane: newFakeControlPlane(), release: make(chan struct{}), honourCtx: true}
	released := sync.OnceFunc(func() { close(cp.release) })
	t.Cleanup(released)
	a := newTestAgent(t, cp, agentDir(t), func(c *Config) { c.SyncWait = 20 * time.Millisecond })
	const n = 500
	// The archive is not there: each launch ends lost once its fetch is
	// let go, so no process is started.
	specs := archived(n, "sha256:"+strings.Repeat("0", 64))
	cp.setDesired(specs...)
	startAgent(t, a)

	waitFor(t, "every launch slot in use", func() bool { _, inFlight, _ := cp.counts(); return inFlight == maxLaunches })
	before := cp.syncCount()
	waitFor(t, "syncs while the launches are held", func() bool { return cp.syncCount() >= before+3 })
	if got := cp.lastSync().Starting; got != n {
		t.Errorf("sync during the launch reports %d starting, want %d", got, n)
	}

	released()
	for _, s := range specs {
		waitPhase(t, cp.fakeControlPlane, s.ID, agentapi.PhaseLost)
	}
	if _, _, most := cp.counts(); most != maxLaunches {
		t.Errorf("at most %d launches ran at once, want %d", most, maxLaunches)
	}
	waitFor(t, "a sync reporting nothing starting", func() bool { return cp.lastSync().Starting == 0 })
}
