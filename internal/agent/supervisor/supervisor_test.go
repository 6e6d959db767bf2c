package supervisor_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// TestMain lets the test binary act as `gpufleet supervise --dir DIR`, so the
// tests run the real supervisor as a process of its own.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "supervise" && os.Args[2] == "--dir" {
		os.Exit(supervisor.Run(os.Args[3]))
	}
	// A race-enabled binary sleeps a second at exit by default; the
	// supervisors these tests start need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

const testTimeout = 20 * time.Second

// trapTerm prints ready, then on TERM prints got-term and exits 3. Its
// background sleep stays in the process group until the supervisor kills it.
const trapTerm = `trap 'echo got-term; exit 3' TERM; echo ready; sleep 30 & wait`

func spec(command ...string) agentapi.ReplicaSpec {
	return agentapi.ReplicaSpec{
		ID:      "job1-a1-r0",
		Command: command,
		Signal:  "SIGTERM",
		Grace:   model.Duration(10 * time.Second),
	}
}

// run is one supervisor process started by a test.
type run struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// start writes spec into a fresh replica directory and starts a supervisor
// on it, detached as the agent does. extraEnv goes into the supervisor's
// environment.
func start(t *testing.T, s agentapi.ReplicaSpec, extraEnv ...string) *run {
	t.Helper()
	return startIn(t, t.TempDir(), s, nil, extraEnv...)
}

// startIn is start in dir, with the agent's sandbox record when sb is set.
func startIn(t testing.TB, dir string, s agentapi.ReplicaSpec, sb *runtime.Sandbox, extraEnv ...string) *run {
	t.Helper()
	if err := supervisor.WriteSpec(dir, s); err != nil {
		t.Fatal(err)
	}
	if sb != nil {
		if err := supervisor.WriteSandbox(dir, *sb); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, supervisor.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "supervise", "--dir", dir)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &run{dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
			return
		default:
		}
		if pids, ok, _ := supervisor.ReadPIDs(dir); ok && pids.Child != nil {
			syscall.Kill(-pids.Child.PID, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		<-r.done
	})
	return r
}

// exit waits for the supervisor to end and returns its exit record.
func (r *run) exit(t *testing.T) supervisor.Exit {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(testTimeout):
		t.Fatalf("supervisor still running after %v; its log:\n%s", testTimeout, r.read(t, supervisor.LogFile))
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("supervisor exited %d; its log:\n%s", code, r.read(t, supervisor.LogFile))
	}
	exit, ok, err := supervisor.ReadExit(r.dir)
	if err != nil || !ok {
		t.Fatalf("ReadExit = _, %v, %v; want a record", ok, err)
	}
	if exit.StartedAt.IsZero() || exit.EndedAt.Before(exit.StartedAt) {
		t.Errorf("exit times: started %v, ended %v", exit.StartedAt, exit.EndedAt)
	}
	return exit
}

func (r *run) read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
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

var ignoreTimes = cmpopts.IgnoreFields(supervisor.Exit{}, "StartedAt", "EndedAt")

func TestRunSuccessRecordsPIDsExitAndOutput(t *testing.T) {
	t.Parallel()
	workdir := filepath.Join(t.TempDir(), "not", "yet")
	s := spec("sh", "-c", `echo out; echo err >&2; echo "greeting=$GREETING leaked=${LEAKED-no}"; pwd`)
	s.Workdir = workdir
	s.Env = map[string]string{"GREETING": "hello"}
	r := start(t, s, "LEAKED=yes")

	if diff := cmp.Diff(supervisor.Exit{Code: 0}, r.exit(t), ignoreTimes); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	want := "out\nerr\ngreeting=hello leaked=no\n" + workdir + "\n"
	if diff := cmp.Diff(want, r.read(t, supervisor.OutputFile)); diff != "" {
		t.Errorf("output.log (-want +got):\n%s", diff)
	}
	pids, ok, err := supervisor.ReadPIDs(r.dir)
	if err != nil || !ok {
		t.Fatalf("ReadPIDs = _, %v, %v; want a record", ok, err)
	}
	if pids.Supervisor.PID != r.cmd.Process.Pid || pids.Supervisor.Start == 0 {
		t.Errorf("pids.Supervisor = %+v; want pid %d with a start time", pids.Supervisor, r.cmd.Process.Pid)
	}
	if pids.Child == nil || pids.Child.PID == 0 || pids.Child.Start == 0 || pids.Child.StartedAt.IsZero() {
		t.Errorf("pids.Child = %+v; want the child's pid and start times", pids.Child)
	}
}

func TestRunRecordsHowTheChildEnded(t *testing.T) {
	t.Parallel()
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		command    []string
		want       supervisor.Exit
		wantReason string // a substring of the reason, when the reason varies
	}{
		"non-zero exit":          {command: []string{"sh", "-c", "exit 7"}, want: supervisor.Exit{Code: 7}},
		"killed by a signal":     {command: []string{"sh", "-c", "kill -KILL $$"}, want: supervisor.Exit{Code: 137, Signal: "SIGKILL"}},
		"program not in PATH":    {command: []string{"gpufleet-no-such-program"}, want: supervisor.Exit{Code: 127}, wantReason: "not found"},
		"program path missing":   {command: []string{"./no-such-program"}, want: supervisor.Exit{Code: 127}, wantReason: "no such file"},
		"program not executable": {command: []string{notExecutable}, want: supervisor.Exit{Code: 126}, wantReason: "permission denied"},
		"empty command":          {command: nil, want: supervisor.Exit{Code: 126}, wantReason: "no command"},
		"zero exit":              {command: []string{"true"}, want: supervisor.Exit{Code: 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := start(t, spec(tc.command...))
			got := r.exit(t)
			if tc.wantReason != "" {
				if !strings.Contains(got.Reason, tc.wantReason) {
					t.Errorf("reason %q does not contain %q", got.Reason, tc.wantReason)
				}
				if !strings.Contains(r.read(t, supervisor.OutputFile), got.Reason) {
					t.Errorf("output.log %q does not explain the failure", r.read(t, supervisor.OutputFile))
				}
				got.Reason = ""
			}
			if diff := cmp.Diff(tc.want, got, ignoreTimes); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunEndsChildAtRuntimeLimit(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		script   string
		want     supervisor.Exit
		wantLog  string
		graceFor time.Duration
	}{
		"child handles the signal": {
			script:   trapTerm,
			graceFor: 10 * time.Second,
			want:     supervisor.Exit{Code: 3, Reason: model.ReasonRuntimeLimit},
			wantLog:  "ready\ngot-term\n",
		},
		"grace expires": {
			script:   `trap '' TERM; echo ready; sleep 30`,
			graceFor: 200 * time.Millisecond,
			want:     supervisor.Exit{Code: 137, Signal: "SIGKILL", Reason: model.ReasonRuntimeLimit},
			wantLog:  "ready\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := spec("sh", "-c", tc.script)
			s.Runtime = model.Duration(500 * time.Millisecond)
			s.Grace = model.Duration(tc.graceFor)
			r := start(t, s)
			if diff := cmp.Diff(tc.want, r.exit(t), ignoreTimes); diff != "" {
				t.Errorf("exit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLog, r.read(t, supervisor.OutputFile)); diff != "" {
				t.Errorf("output.log (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunStopsChildOnSIGTERM(t *testing.T) {
	t.Parallel()
	s := spec("sh", "-c", trapTerm)
	s.Signal = "TERM"
	r := start(t, s)
	waitFor(t, "the child to be ready", func() bool { return r.read(t, supervisor.OutputFile) == "ready\n" })

	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	want := supervisor.Exit{Code: 3, Reason: agentapi.ReasonStopped}
	if diff := cmp.Diff(want, r.exit(t), ignoreTimes); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("ready\ngot-term\n", r.read(t, supervisor.OutputFile)); diff != "" {
		t.Errorf("output.log (-want +got):\n%s", diff)
	}
}

func TestRunKillsWhatTheChildLeavesInItsGroup(t *testing.T) {
	t.Parallel()
	workdir := t.TempDir()
	s := spec("sh", "-c", `sleep 30 & echo $! > grandchild.pid; while [ ! -e proceed ]; do sleep 0.01; done`)
	s.Workdir = workdir
	r := start(t, s)

	var pid int
	waitFor(t, "the grandchild's pid", func() bool {
		data, err := os.ReadFile(filepath.Join(workdir, "grandchild.pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	})
	startTime, err := supervisor.ProcessStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workdir, "proceed"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(supervisor.Exit{Code: 0}, r.exit(t), ignoreTimes); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	if supervisor.Alive(pid, startTime) {
		t.Errorf("grandchild %d is alive after the supervisor wrote the exit record", pid)
	}
}

func TestAliveChecksPIDAndStartTime(t *testing.T) {
	t.Parallel()
	self, err := supervisor.ProcessStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !supervisor.Alive(os.Getpid(), self) {
		t.Error("Alive(self) = false")
	}
	if supervisor.Alive(os.Getpid(), self+1) {
		t.Error("Alive(self, another start time) = true; a recycled pid must not count")
	}
	for _, pid := range []int{0, -1} {
		if supervisor.Alive(pid, 0) {
			t.Errorf("Alive(%d) = true", pid)
		}
	}

	// An exited child is not alive, reaped or not.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := supervisor.ProcessStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unreaped child to count as gone", func() bool { return !supervisor.Alive(cmd.Process.Pid, start) })
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if supervisor.Alive(cmd.Process.Pid, start) {
		t.Error("Alive(reaped child) = true")
	}
	if _, err := supervisor.ProcessStartTime(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ProcessStartTime(reaped child) error = %v; want fs.ErrNotExist", err)
	}
}
