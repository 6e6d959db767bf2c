package agent

import (
	"os"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// A replica runs on while the server answers, past its heartbeat timeout
// many times over; once the server stops answering (a frozen leader, a
// partition) the node's supervisors end it before the server could have
// given the node up (its heartbeat timeout after the last sync that
// reached it), and the agent reports it lost once the server answers again.
func TestStalledServerFencesReplicas(t *testing.T) {
	t.Parallel()
	const lostAfter = 6 * time.Second // the kill lands H/12 (0.5 s) inside it: room for a loaded machine
	cp := newFakeControlPlane()
	cp.lostAfter = lostAfter
	dir := agentDir(t)
	cp.setDesired(shell("r1", trapTerm))
	startAgent(t, newTestAgent(t, cp, dir, func(c *Config) { c.SelfFence = true }))
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)

	time.Sleep(2 * lostAfter) // the server answers: the fence keeps moving; bounded
	if s, _ := cp.status("r1"); s.Phase != agentapi.PhaseRunning {
		t.Fatalf("with the server answering, r1 is %s (%s), want running", s.Phase, s.Reason)
	}
	if _, ok, _ := supervisor.ReadExit(dir + "/" + replicasDir + "/r1"); ok {
		t.Fatal("with the server answering, r1 ended")
	}

	// Every sync the server took from now on is answered never: the last
	// one that reached it began no later than here.
	stalled := time.Now()
	cp.setStalled(true)
	var exit supervisor.Exit
	waitFor(t, "r1 to end", func() bool {
		e, ok, _ := supervisor.ReadExit(dir + "/" + replicasDir + "/r1")
		exit = e
		return ok
	})
	if exit.Reason != agentapi.ReasonFenced {
		t.Errorf("r1 ended with reason %q, want %q", exit.Reason, agentapi.ReasonFenced)
	}
	if !exit.EndedAt.Before(stalled.Add(lostAfter)) {
		t.Errorf("r1 ended %s after the server stopped answering, not before its heartbeat timeout (%s)", exit.EndedAt.Sub(stalled), lostAfter)
	}
	cp.setStalled(false)
	got := waitPhase(t, cp, "r1", agentapi.PhaseLost)
	if got.Reason != agentapi.ReasonFenced {
		t.Errorf("reported reason %q, want %q", got.Reason, agentapi.ReasonFenced)
	}
}

// An agent that does not fence itself leaves no fence behind: one that an
// earlier run wrote is removed, and replicas run through a stalled server.
func TestNoFenceWithoutSelfFence(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	cp.lostAfter = 2 * time.Second
	dir := agentDir(t)
	a := newTestAgent(t, cp, dir)
	past := time.Now().Add(-time.Minute)
	if err := os.MkdirAll(a.replicas, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := supervisor.WriteFence(a.replicas, supervisor.Fence{StopAt: past, KillAt: past}); err != nil {
		t.Fatal(err)
	}
	cp.setDesired(shell("r1", trapTerm))
	startAgent(t, a)
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)
	cp.setStalled(true)
	time.Sleep(2 * cp.lostAfter) // bounded; r1 must run on
	if _, ok, _ := supervisor.ReadExit(dir + "/" + replicasDir + "/r1"); ok {
		t.Fatal("r1 ended without self-fencing")
	}
	cp.setStalled(false)
}

// A server that is down for a while shorter than the fence's stop (a
// restart) is found again before the fence stops anything, even with a
// retry back-off that would otherwise grow past the fence: while the agent
// fences itself it retries at least every H/12.
func TestServerBackBeforeTheFenceKeepsReplicas(t *testing.T) {
	t.Parallel()
	// The fence stops r1 4.5 s after the last answered sync was sent (at
	// most one long-poll wait, 1 s, before the server goes down); the
	// first retry after a failure would come 5 to 10 s later.
	const lostAfter = 6 * time.Second
	cp := newFakeControlPlane()
	cp.lostAfter = lostAfter
	dir := agentDir(t)
	cp.setDesired(shell("r1", trapTerm))
	startAgent(t, newTestAgent(t, cp, dir, func(c *Config) {
		c.SelfFence = true
		c.RetryBackoff, c.MaxRetryBackoff = 10*time.Second, time.Minute
	}))
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)
	cp.setDown(true)
	time.Sleep(1500 * time.Millisecond) // a restart
	cp.setDown(false)
	time.Sleep(lostAfter) // bounded: past where the fence would have stopped r1 had it not moved
	if e, ok, _ := supervisor.ReadExit(dir + "/" + replicasDir + "/r1"); ok {
		t.Fatalf("r1 ended (%s) though the server was back well before the fence", e.Reason)
	}
}

// A replica whose launch waits behind others (a burst) while the server
// stops answering is not handed to its supervisor once the fence is near:
// it would be refused at the fence without running, and its attempt lost
// and retried. It waits for the server's next answer and then runs once.
func TestLaunchWaitsForTheFenceToMove(t *testing.T) {
	t.Parallel()
	const lostAfter = 3 * time.Second
	cp := newFakeControlPlane()
	cp.lostAfter = lostAfter
	dir := agentDir(t)
	a := newTestAgent(t, cp, dir, func(c *Config) { c.SelfFence = true })
	for range maxLaunches {
		a.slots <- struct{}{} // every launch slot taken: r1 waits for one
	}
	marks := t.TempDir() + "/starts"
	cp.setDesired(shell("r1", "echo x >> "+marks))
	startAgent(t, a)
	waitFor(t, "r1 to wait for a launch slot", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.starting["r1"] != nil
	})
	// No sync is answered from here: the fence stops replicas at most
	// 3/4·H from now.
	stalled := time.Now()
	cp.setStalled(true)
	time.Sleep(time.Until(stalled.Add(lostAfter))) // past the fence's stop; bounded
	for range maxLaunches {
		<-a.slots
	}
	time.Sleep(500 * time.Millisecond) // a launch now would be refused at the fence; bounded
	cp.setStalled(false)
	var s agentapi.ReplicaStatus
	waitFor(t, "r1 to end", func() bool {
		s, _ = cp.status("r1")
		return ended(s.Phase)
	})
	if s.Phase != agentapi.PhaseExited || s.ExitCode == nil || *s.ExitCode != 0 {
		t.Errorf("r1 ended %s (%s), want exited 0: launched once the server answered", s.Phase, s.Reason)
	}
	if b, _ := os.ReadFile(marks); string(b) != "x\n" {
		t.Errorf("r1's command ran %q, want once", b)
	}
}

// TestFenceRefusalIsReportedNeverStarted: a replica its supervisor refused
// to start (the fence had passed) is reported lost and never started, so
// that the server requeues its job without counting a retry; one fenced
// while it ran is lost and did start.
func TestFenceRefusalIsReportedNeverStarted(t *testing.T) {
	t.Parallel()
	at := time.Now()
	refused := exitedStatus("r1", supervisor.Exit{Code: supervisor.CodeCannotRun, Reason: agentapi.ReasonFenced, StartedAt: at, EndedAt: at, NeverStarted: true})
	if refused.Phase != agentapi.PhaseLost || !refused.NeverStarted || !refused.StartedAt.IsZero() {
		t.Errorf("a refused replica is reported %+v, want lost, never started, with no start", refused)
	}
	ran := exitedStatus("r2", supervisor.Exit{Code: 137, Signal: "SIGKILL", Reason: agentapi.ReasonFenced, StartedAt: at.Add(-time.Minute), EndedAt: at})
	if ran.Phase != agentapi.PhaseLost || ran.NeverStarted || !ran.StartedAt.Equal(at.Add(-time.Minute)) {
		t.Errorf("a replica fenced while it ran is reported %+v, want lost, started", ran)
	}
}
