package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestMain lets the test binary act as `gpufleet supervise --dir DIR`, so
// agents under test launch the real supervisor as processes of their own.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "supervise" && os.Args[2] == "--dir" {
		os.Exit(supervisor.Run(os.Args[3]))
	}
	// A race-enabled binary sleeps a second at exit by default; the
	// supervisors these tests start need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

const testTimeout = 30 * time.Second

// trapTerm prints ready, then on TERM prints got-term and exits 3.
const trapTerm = `trap 'echo got-term; exit 3' TERM; echo ready; sleep 30 & wait`

// agentDir returns a fresh agent directory. When the test ends, every
// replica process still running from it is killed.
func agentDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		paths, _ := filepath.Glob(filepath.Join(dir, replicasDir, "*"))
		for _, p := range paths {
			pids, ok, _ := supervisor.ReadPIDs(p)
			if !ok {
				continue
			}
			if c := pids.Child; c != nil && supervisor.Alive(c.PID, c.Start) {
				syscall.Kill(-c.PID, syscall.SIGKILL)
			}
			if s := pids.Supervisor; supervisor.Alive(s.PID, s.Start) {
				syscall.Kill(s.PID, syscall.SIGKILL)
			}
		}
	})
	return dir
}

// newTestAgent returns an agent on dir with short intervals, whose
// supervisors are this test binary, changed by edits. Its log is shown if
// the test fails.
func newTestAgent(t *testing.T, cp agentapi.ControlPlane, dir string, edits ...func(*Config)) *Agent {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs)
		}
	})
	cfg := Config{
		Dir:               dir,
		ControlPlane:      cp,
		Registration:      agentapi.Registration{Name: "test-node", Provider: "local", GPUSource: "none", AgentVersion: "test"},
		SupervisorCommand: []string{os.Args[0], "supervise", "--dir"},
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		SyncWait:          time.Second,
		LogChunkSize:      64,
		PollInterval:      20 * time.Millisecond,
		RetryBackoff:      10 * time.Millisecond,
		MaxRetryBackoff:   50 * time.Millisecond,
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startAgent runs a until the returned stop is called or the test ends.
func startAgent(t *testing.T, a *Agent) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(testTimeout):
				t.Errorf("Run still running %v after its context ended", testTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitPhase waits until the server's latest status for id has phase.
func waitPhase(t *testing.T, cp *fakeControlPlane, id string, phase agentapi.Phase) agentapi.ReplicaStatus {
	t.Helper()
	var s agentapi.ReplicaStatus
	waitFor(t, fmt.Sprintf("replica %s %s", id, phase), func() bool {
		s, _ = cp.status(id)
		return s.Phase == phase
	})
	return s
}

func shell(id, script string) agentapi.ReplicaSpec {
	return agentapi.ReplicaSpec{
		ID:        id,
		JobID:     "job1",
		AttemptID: "job1-a1",
		Attempt:   1,
		Command:   []string{"sh", "-c", script},
		Env:       map[string]string{},
		Signal:    "SIGTERM",
		Grace:     model.Duration(10 * time.Second),
	}
}

// gated is a replica that prints started, waits until the file gate
// exists, prints finishing and exits 5.
func gated(id, gate string) agentapi.ReplicaSpec {
	s := shell(id, `echo started; while [ ! -e "$GATE" ]; do sleep 0.02; done; echo finishing; exit 5`)
	s.Env["GATE"] = gate
	return s
}

const gatedLog = "started\nfinishing\n"

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func intPtr(n int) *int { return &n }

// ignoreTimes compares statuses without their times.
var ignoreTimes = cmpopts.IgnoreFields(agentapi.ReplicaStatus{}, "StartedAt", "EndedAt", "ObservedAt")

func TestReplicaExitIsReportedAfterItsWholeLog(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	cp.setDesired(shell("r1", `echo out; echo err >&2; i=0; while [ $i -lt 40 ]; do echo "line $i"; i=$((i+1)); done; exit 3`))
	startAgent(t, newTestAgent(t, cp, dir))

	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	want := agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(3)}
	if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if got.StartedAt.IsZero() || got.EndedAt == nil || got.EndedAt.Before(got.StartedAt) {
		t.Errorf("times: started %v, ended %v", got.StartedAt, got.EndedAt)
	}
	wantLog := "out\nerr\n"
	for i := range 40 {
		wantLog += fmt.Sprintf("line %d\n", i)
	}
	endLog, _ := cp.endLog("r1")
	if diff := cmp.Diff(fakeLog{data: []byte(wantLog), eof: true}, endLog, cmp.AllowUnexported(fakeLog{})); diff != "" {
		t.Errorf("log when the exit was reported (-want +got):\n%s", diff)
	}

	// Without workload users the agent says it does not isolate jobs.
	wantRegs := []agentapi.Registration{{Name: "test-node", Provider: "local", GPUSource: "none", AgentVersion: "test",
		Runtimes: []string{"process"}, NotIsolated: true}}
	if diff := cmp.Diff(wantRegs, cp.registrations()); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}
	if id, err := os.ReadFile(filepath.Join(dir, nodeIDFile)); err != nil || string(id) != "node-1\n" {
		t.Errorf("node-id file = %q, %v; want node-1", id, err)
	}
}

func TestStoppedReplicaIsReportedStopped(t *testing.T) {
	t.Parallel()
	tests := map[string]func(cp *fakeControlPlane, spec agentapi.ReplicaSpec){
		"stop requested": func(cp *fakeControlPlane, spec agentapi.ReplicaSpec) {
			spec.Stop = true
			cp.setDesired(spec)
		},
		"no longer desired": func(cp *fakeControlPlane, _ agentapi.ReplicaSpec) { cp.setDesired() },
	}
	for name, stop := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane()
			spec := shell("r1", trapTerm)
			cp.setDesired(spec)
			startAgent(t, newTestAgent(t, cp, agentDir(t)))
			waitPhase(t, cp, "r1", agentapi.PhaseRunning)
			waitFor(t, "the replica to be ready", func() bool { return string(cp.logOf("r1").data) == "ready\n" })

			stop(cp, spec)
			got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
			want := agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(3), Reason: agentapi.ReasonStopped}
			if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if endLog, _ := cp.endLog("r1"); string(endLog.data) != "ready\ngot-term\n" || !endLog.eof {
				t.Errorf("log when the exit was reported = %q, eof %v; want ready, got-term, eof", endLog.data, endLog.eof)
			}
		})
	}
}

func TestRuntimeLimitIsReported(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	spec := shell("r1", trapTerm)
	spec.Runtime = model.Duration(500 * time.Millisecond)
	cp.setDesired(spec)
	startAgent(t, newTestAgent(t, cp, agentDir(t)))

	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	want := agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(3), Reason: model.ReasonRuntimeLimit}
	if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestRestartedAgentAdoptsRunningReplica(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	gate := filepath.Join(t.TempDir(), "gate")
	cp.setDesired(gated("r1", gate))
	stop := startAgent(t, newTestAgent(t, cp, dir))
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)
	stop()
	before, _, err := supervisor.ReadPIDs(filepath.Join(dir, replicasDir, "r1"))
	if err != nil {
		t.Fatal(err)
	}

	synced := cp.syncCount()
	startAgent(t, newTestAgent(t, cp, dir))
	waitFor(t, "the new agent to report r1 running", func() bool {
		req := cp.lastSync()
		return cp.syncCount() > synced && len(req.Statuses) == 1 && req.Statuses[0].Phase == agentapi.PhaseRunning
	})
	if regs := cp.registrations(); len(regs) != 2 || regs[1].NodeID != "node-1" {
		t.Errorf("registrations = %+v; want the restart to re-register node-1", regs)
	}

	touch(t, gate)
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if diff := cmp.Diff(agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(5)}, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if endLog, _ := cp.endLog("r1"); string(endLog.data) != gatedLog || !endLog.eof {
		t.Errorf("log when the exit was reported = %q, eof %v; want %q, eof", endLog.data, endLog.eof, gatedLog)
	}
	after, _, err := supervisor.ReadPIDs(filepath.Join(dir, replicasDir, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("pid.json changed: the replica was started again (-before +after):\n%s", diff)
	}
}

func TestRestartedAgentReportsLostReplica(t *testing.T) {
	t.Parallel()
	for name, killChild := range map[string]bool{"supervisor and child killed": true, "only supervisor killed": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane()
			dir := agentDir(t)
			cp.setDesired(gated("r1", filepath.Join(t.TempDir(), "gate")))
			stop := startAgent(t, newTestAgent(t, cp, dir))
			waitPhase(t, cp, "r1", agentapi.PhaseRunning)
			stop()

			pids, _, err := supervisor.ReadPIDs(filepath.Join(dir, replicasDir, "r1"))
			if err != nil || pids.Child == nil {
				t.Fatalf("ReadPIDs = %+v, %v; want the child recorded", pids, err)
			}
			if killChild {
				syscall.Kill(-pids.Child.PID, syscall.SIGKILL)
			}
			syscall.Kill(pids.Supervisor.PID, syscall.SIGKILL)
			waitFor(t, "the supervisor to die", func() bool { return !supervisor.Alive(pids.Supervisor.PID, pids.Supervisor.Start) })

			startAgent(t, newTestAgent(t, cp, dir))
			got := waitPhase(t, cp, "r1", agentapi.PhaseLost)
			want := agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseLost, Reason: model.ReasonLost}
			if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			waitFor(t, "the lost replica's child to be killed", func() bool { return !supervisor.Alive(pids.Child.PID, pids.Child.Start) })
		})
	}
}

func TestRestartedAgentReportsExitThatHappenedWhileItWasDown(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	gate := filepath.Join(t.TempDir(), "gate")
	cp.setDesired(gated("r1", gate))
	stop := startAgent(t, newTestAgent(t, cp, dir))
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)
	stop()

	touch(t, gate)
	waitFor(t, "the exit record", func() bool {
		_, ok, _ := supervisor.ReadExit(filepath.Join(dir, replicasDir, "r1"))
		return ok
	})
	if s, _ := cp.status("r1"); s.Phase != agentapi.PhaseRunning {
		t.Fatalf("server saw %s with no agent running", s.Phase)
	}
	startAgent(t, newTestAgent(t, cp, dir))
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if diff := cmp.Diff(agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(5)}, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if endLog, _ := cp.endLog("r1"); string(endLog.data) != gatedLog || !endLog.eof {
		t.Errorf("log when the exit was reported = %q, eof %v; want %q, eof", endLog.data, endLog.eof, gatedLog)
	}
}

func TestReplicasKeepRunningWhileServerIsDown(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	gate := filepath.Join(t.TempDir(), "gate")
	cp.setDown(true)
	cp.setDesired(gated("r1", gate))
	startAgent(t, newTestAgent(t, cp, dir))
	waitFor(t, "registration retries", func() bool { return cp.failed() >= 3 })

	cp.setDown(false)
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)

	cp.setDown(true)
	failed := cp.failed()
	waitFor(t, "sync retries", func() bool { return cp.failed() >= failed+5 })
	pids, _, err := supervisor.ReadPIDs(filepath.Join(dir, replicasDir, "r1"))
	if err != nil || pids.Child == nil {
		t.Fatalf("ReadPIDs = %+v, %v", pids, err)
	}
	if !supervisor.Alive(pids.Supervisor.PID, pids.Supervisor.Start) || !supervisor.Alive(pids.Child.PID, pids.Child.Start) {
		t.Fatal("the replica stopped while the server was down")
	}
	touch(t, gate)
	waitFor(t, "the exit record", func() bool {
		_, ok, _ := supervisor.ReadExit(filepath.Join(dir, replicasDir, "r1"))
		return ok
	})

	cp.setDown(false)
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if diff := cmp.Diff(agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(5)}, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if endLog, _ := cp.endLog("r1"); string(endLog.data) != gatedLog || !endLog.eof {
		t.Errorf("log when the exit was reported = %q, eof %v; want %q, eof", endLog.data, endLog.eof, gatedLog)
	}
}

func TestEndedReplicaIsForgottenAndNeverStartedAgain(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	rdir := filepath.Join(dir, replicasDir, "r1")
	spec := shell("r1", "echo run")
	cp.setDesired(spec)
	startAgent(t, newTestAgent(t, cp, dir))
	waitPhase(t, cp, "r1", agentapi.PhaseExited)

	cp.setDesired()
	waitFor(t, "the replica to be marked acknowledged", func() bool {
		_, err := os.Stat(filepath.Join(rdir, ackedFile))
		return err == nil
	})
	synced := cp.syncCount()
	waitFor(t, "a sync without the forgotten replica", func() bool {
		return cp.syncCount() > synced && len(cp.lastSync().Statuses) == 0
	})

	// The server asks for the same replica again: the agent reports how it
	// ended rather than running it twice.
	cp.forget("r1")
	cp.setDesired(spec)
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if diff := cmp.Diff(agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(0)}, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	out, err := os.ReadFile(filepath.Join(rdir, supervisor.OutputFile))
	if err != nil || string(out) != "run\n" {
		t.Errorf("output.log = %q, %v; want one run", out, err)
	}
	if l := cp.logOf("r1"); string(l.data) != "run\n" || !l.eof {
		t.Errorf("server log = %q, eof %v; want one run, eof", l.data, l.eof)
	}
}

func TestReplicasThatAreNeverStarted(t *testing.T) {
	t.Parallel()
	stopped := shell("r1", "echo should-not-run")
	stopped.Stop = true
	tests := map[string]struct {
		spec       agentapi.ReplicaSpec
		want       agentapi.ReplicaStatus
		wantReason string
	}{
		"stopped before it started": {
			spec: stopped,
			want: agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, Reason: agentapi.ReasonStopped},
		},
		"unsafe id": {
			spec:       shell("../escape", "echo should-not-run"),
			want:       agentapi.ReplicaStatus{ID: "../escape", Phase: agentapi.PhaseLost},
			wantReason: "agent refused the replica",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane()
			dir := agentDir(t)
			cp.setDesired(tc.spec)
			startAgent(t, newTestAgent(t, cp, dir))
			got := waitPhase(t, cp, tc.spec.ID, tc.want.Phase)
			if !strings.Contains(got.Reason, tc.wantReason) {
				t.Errorf("reason %q does not contain %q", got.Reason, tc.wantReason)
			}
			if tc.wantReason != "" {
				got.Reason = ""
			}
			if diff := cmp.Diff(tc.want, got, ignoreTimes); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			entries, err := os.ReadDir(filepath.Join(dir, replicasDir))
			if err != nil || len(entries) != 0 {
				t.Errorf("replica directories = %v, %v; want none", entries, err)
			}
		})
	}
}

func TestSecondAgentOnTheSameDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	startAgent(t, newTestAgent(t, cp, dir))
	waitFor(t, "the first agent to register", func() bool { return len(cp.registrations()) == 1 })

	err := newTestAgent(t, cp, dir).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another agent is running") {
		t.Fatalf("second Run = %v; want it refused", err)
	}
}

func TestSupervisorThatFailsLosesItsReplica(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		command    []string
		wantReason string
	}{
		"cannot be launched": {
			command:    []string{"/nonexistent/gpufleet", "supervise", "--dir"},
			wantReason: "agent could not launch the supervisor",
		},
		"exits without a pid record": {
			command:    []string{"true"},
			wantReason: "supervisor exited without recording its pid",
		},
		// It records its own pid where the test can find it, then hangs.
		"hangs without a pid record": {
			command:    []string{"sh", "-c", `echo $$ > "$1/hung.pid"; exec sleep 30`, "sh"},
			wantReason: "supervisor did not record its pid within 300ms",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := newFakeControlPlane()
			dir := agentDir(t)
			cp.setDesired(shell("r1", "echo should-not-run"))
			startAgent(t, newTestAgent(t, cp, dir, func(c *Config) {
				c.SupervisorCommand = tc.command
				c.StartTimeout = 300 * time.Millisecond
			}))
			got := waitPhase(t, cp, "r1", agentapi.PhaseLost)
			want := agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseLost}
			if !strings.HasPrefix(got.Reason, tc.wantReason) {
				t.Errorf("reason %q does not start with %q", got.Reason, tc.wantReason)
			}
			got.Reason = ""
			if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if data, err := os.ReadFile(filepath.Join(dir, replicasDir, "r1", "hung.pid")); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
				waitFor(t, "the hung supervisor to be killed", func() bool {
					_, err := supervisor.ProcessStartTime(pid)
					return err != nil
				})
			}
		})
	}
}

// TestAgentRegistersAgainWhenTheServerForgetsTheNode: a sync refused with
// ErrUnknownNode makes the agent register under the same id, report its
// replicas afresh, and leave them running.
func TestAgentRegistersAgainWhenTheServerForgetsTheNode(t *testing.T) {
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	gate := filepath.Join(t.TempDir(), "gate")
	cp.setDesired(gated("r1", gate))
	startAgent(t, newTestAgent(t, cp, dir))
	waitPhase(t, cp, "r1", agentapi.PhaseRunning)

	cp.forget("r1")
	cp.forgetNode()
	waitFor(t, "the agent to register again", func() bool { return len(cp.registrations()) == 2 })
	if regs := cp.registrations(); regs[1].NodeID != "node-1" {
		t.Errorf("re-registration under %q, want the node's id node-1", regs[1].NodeID)
	}
	waitPhase(t, cp, "r1", agentapi.PhaseRunning) // reported afresh

	touch(t, gate)
	got := waitPhase(t, cp, "r1", agentapi.PhaseExited)
	if diff := cmp.Diff(agentapi.ReplicaStatus{ID: "r1", Phase: agentapi.PhaseExited, ExitCode: intPtr(5)}, got, ignoreTimes); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}
