package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// These tests run the real binary as real processes: a server on loopback,
// CLI commands against it, jobs as child processes.

var (
	binary string
	// cliDir is the CLI's working directory in these tests.
	cliDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpufleet-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "gpufleet")
	// Jobs run as workload users and call the binary (gpufleet metric):
	// it must be theirs to run, as an installed binary is.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The CLI sends its working directory as a job's workdir: run it from
	// a folder workload users can enter, wherever the checkout lies.
	cliDir = filepath.Join(dir, "work")
	if err := os.Mkdir(cliDir, 0o777); err != nil || os.Chmod(cliDir, 0o777) != nil {
		fmt.Fprintln(os.Stderr, "making the CLI's folder:", err)
		os.Exit(1)
	}
	// No CLI context of the machine's user may leak into the tests.
	if err := os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// -race unless GPUFLEET_TEST_RACE=0: the binary a user runs, for
	// timings at full size (BENCHMARKS.md).
	args := []string{"build", "-race", "-o", binary, "."}
	if os.Getenv("GPUFLEET_TEST_RACE") == "0" {
		args = slices.Delete(args, 1, 2)
	}
	build := exec.Command("go", args...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gpufleet:", err)
		os.Exit(1)
	}
	code := pgtest.Main(m) // m.Run, then stops PostgreSQL if a test started it
	os.RemoveAll(dir)
	os.Exit(code)
}

// serverProc is a `gpufleet up` process.
type serverProc struct {
	t       *testing.T
	dataDir string
	listen  string
	cmd     *exec.Cmd
	out     *testutil.SyncBuffer
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs `gpufleet up` with 4 fake H100s and any extra flags.
func startServer(t *testing.T, dataDir, listen string, extra ...string) *serverProc {
	t.Helper()
	return startServerEnv(t, nil, dataDir, listen, extra...)
}

// startServerEnv is startServer with env added to the server's
// environment (GPUFLEET_* variables included).
func startServerEnv(t *testing.T, env []string, dataDir, listen string, extra ...string) *serverProc {
	t.Helper()
	s := &serverProc{t: t, dataDir: dataDir, listen: listen, out: &testutil.SyncBuffer{}}
	s.cmd = exec.Command(binary, append([]string{"up", "--data-dir", dataDir, "--listen", listen, "--fake-gpus", "4xH100"}, extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = append(cleanEnv(), env...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dataDir, serverFile)); err == nil {
			if out, err := s.gpufleetErr("nodes", "list", "-o", "json"); err == nil && strings.Contains(out, `"ready"`) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up:\n%s", s.out)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's readiness; bounded by the deadline
	}
}

func (s *serverProc) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUFLEET_") {
			env = append(env, kv)
		}
	}
	return env
}

// gpufleetCmd is a CLI command against the server, not yet run.
func (s *serverProc) gpufleetCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, append([]string{"--data-dir", s.dataDir}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Dir = cliDir
	return cmd
}

// gpufleetErr runs a CLI command against the server.
func (s *serverProc) gpufleetErr(args ...string) (string, error) {
	out, err := s.gpufleetCmd(args...).CombinedOutput()
	return string(out), err
}

// gpufleetOut runs a CLI command against the server and returns its
// standard output alone (notes such as run's upload summary go to stderr);
// a failure fails the test with both.
func (s *serverProc) gpufleetOut(args ...string) string {
	s.t.Helper()
	out, err := outputOf(s.gpufleetCmd(args...))
	if err != nil {
		s.t.Fatalf("gpufleet %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, s.out)
	}
	return out
}

func (s *serverProc) gpufleet(args ...string) string {
	s.t.Helper()
	out, err := s.gpufleetErr(args...)
	if err != nil {
		s.t.Fatalf("gpufleet %s: %v\n%s\nserver log:\n%s", strings.Join(args, " "), err, out, s.out)
	}
	return out
}

func (s *serverProc) job(id string) api.JobView {
	s.t.Helper()
	var v api.JobView
	if err := json.Unmarshal([]byte(s.gpufleet("jobs", "get", id, "-o", "json")), &v); err != nil {
		s.t.Fatal(err)
	}
	return v
}

func (s *serverProc) waitJob(id string, ok func(api.JobView) bool, what string) api.JobView {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v := s.job(id)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s never %s; it is %s (%s)\nserver log:\n%s", id, what, v.State, v.Reason, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
}

func TestQuickstart(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t))
	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--", "sh", "-c", "echo hello"))
	if !strings.HasPrefix(id, "j-") {
		t.Fatalf("run printed %q, want a job id", id)
	}
	s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if got := s.gpufleet("jobs", "logs", id); got != "hello\n" {
		t.Fatalf("logs = %q, want %q", got, "hello\n")
	}
	if v := s.job(id); v.State != model.JobSucceeded {
		t.Fatalf("job %s, want succeeded", v.State)
	}
	// --follow streams the output and exits with the job's code.
	cmd := exec.Command(binary, "--data-dir", s.dataDir, "run", "--follow", "--gpus", "2", "--gpu", "H100", "--", "sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES; exit 7")
	cmd.Env = cleanEnv()
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("run --follow exit = %v, want 7", err)
	}
	if stdout.String() != "gpus=0,1\n" {
		t.Fatalf("followed output = %q", stdout.String())
	}
}

func TestRuntimeLimitAndCancel(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t))
	limited := strings.TrimSpace(s.gpufleet("run", "--runtime", "1s", "--grace", "5s", "--", "sh", "-c", `trap 'echo checkpoint; exit 0' TERM; sleep 60 & wait`))
	v := s.waitJob(limited, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobFailed || v.Reason != model.ReasonRuntimeLimit {
		t.Fatalf("limited job = %s %q, want failed %q", v.State, v.Reason, model.ReasonRuntimeLimit)
	}
	if got := s.gpufleet("jobs", "logs", limited); got != "checkpoint\n" {
		t.Fatalf("limited job's log = %q: the grace period should let it checkpoint", got)
	}
	long := strings.TrimSpace(s.gpufleet("run", "--grace", "1s", "--", "sh", "-c", "echo started; sleep 60"))
	s.waitJob(long, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	s.gpufleet("jobs", "cancel", long)
	v = s.waitJob(long, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobCancelled {
		t.Fatalf("cancelled job = %s", v.State)
	}
}

// TestKill9 kills the server mid-run and restarts it on the same data dir:
// every accepted job is there; a replica still running is re-adopted (it
// runs once, to the end); one that finished meanwhile keeps its exit status;
// one whose processes died without a record is lost and runs again.
func TestKill9(t *testing.T) {
	dataDir, listen := t.TempDir(), freePort(t)
	marks := sharedDir(t)
	s := startServer(t, dataDir, listen)
	servers := []*serverProc{s}
	keepServerOutputs(t, dataDir, &servers)

	script := func(name, body string) []string {
		return []string{"run", "--name", name, "--", "sh", "-c", fmt.Sprintf("umask 0; echo $$ >> %s/%s.starts; %s", marks, name, body)}
	}
	survivor := strings.TrimSpace(s.gpufleet(script("survivor", fmt.Sprintf("while [ ! -e %s/release ]; do sleep 0.1; done; echo finished", marks))...))
	finisher := strings.TrimSpace(s.gpufleet(script("finisher", fmt.Sprintf("while [ ! -e %s/finish ]; do sleep 0.1; done; exit 4", marks))...))
	victim := strings.TrimSpace(s.gpufleet(script("victim", "sleep 600")...))
	queued := strings.TrimSpace(s.gpufleet("run", "--gpus", "8", "--name", "too-big", "--", "true")) // 8 > 4 GPUs: stays queued
	for _, id := range []string{survivor, finisher, victim} {
		s.waitJob(id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	}
	victimBefore := s.job(victim)

	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()

	// While the server is down: one job finishes, one loses its processes.
	if err := os.WriteFile(filepath.Join(marks, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	killReplica(t, dataDir, model.ReplicaID(model.AttemptID(victim, 1), 0))
	waitFile(t, filepath.Join(dataDir, "agent", "replicas", model.ReplicaID(model.AttemptID(finisher, 1), 0), "exit.json"))

	s2 := startServer(t, dataDir, listen)
	servers = append(servers, s2)
	for _, id := range []string{survivor, finisher, victim, queued} {
		s2.job(id) // every accepted job is still there
	}
	if v := s2.job(queued); v.State != model.JobQueued {
		t.Fatalf("queued job = %s after restart", v.State)
	}
	v := s2.waitJob(finisher, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobFailed || v.ExitCode == nil || *v.ExitCode != 4 {
		t.Fatalf("finisher = %s exit %v, want failed with its real exit code 4", v.State, v.ExitCode)
	}
	v = s2.waitJob(victim, func(v api.JobView) bool { return v.Attempts == 2 && v.State == model.JobRunning }, "ran a second attempt")
	if v.AttemptDetails[0].State != model.AttemptLost {
		t.Fatalf("victim's first attempt = %s, want lost", v.AttemptDetails[0].State)
	}
	if v.Preemptions != 1 || victimBefore.Attempts != 1 {
		t.Fatalf("victim preemptions = %d (attempts before the kill %d)", v.Preemptions, victimBefore.Attempts)
	}
	if err := os.WriteFile(filepath.Join(marks, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	v = s2.waitJob(survivor, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded || v.Attempts != 1 {
		code := "none"
		if v.ExitCode != nil {
			code = fmt.Sprint(*v.ExitCode)
		}
		t.Fatalf("survivor = %s (%q, exit code %s) after %d attempts, want succeeded in its one re-adopted attempt", v.State, v.Reason, code, v.Attempts)
	}
	if got := s2.gpufleet("jobs", "logs", survivor); got != "finished\n" {
		t.Fatalf("survivor's log = %q", got)
	}
	starts, _ := os.ReadFile(filepath.Join(marks, "survivor.starts"))
	if n := strings.Count(string(starts), "\n"); n != 1 {
		t.Fatalf("survivor started %d times, want once", n)
	}
	s2.gpufleet("jobs", "cancel", victim)
}

// keepOutputs keeps processes' output, by name: whole, in
// GPUFLEET_TEST_LOGDIR when it is set (of every run, so a passing run's
// timeline can be read too), else the end of each in the test's log of a
// failed run.
func keepOutputs(t *testing.T, outs map[string]string) {
	dir := os.Getenv("GPUFLEET_TEST_LOGDIR")
	if !t.Failed() && dir == "" {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(outs)) {
		if dir != "" {
			path := filepath.Join(dir, t.Name()+"-"+name+".log")
			if err := os.WriteFile(path, []byte(outs[name]), 0o644); err == nil {
				t.Logf("%s's output: %s", name, path)
				continue
			}
		}
		t.Logf("--- the end of %s's output:\n%s", name, lastOf(outs[name], 6000))
	}
}

// keepServerOutputs keeps, at the end of the test, the output of the
// servers *servers has by then, all on dataDir, and the logs of its
// replicas' supervisors (keepOutputs). Registered after dataDir was made,
// it runs before dataDir is removed.
func keepServerOutputs(t *testing.T, dataDir string, servers *[]*serverProc) {
	t.Cleanup(func() {
		outs := map[string]string{}
		for i, s := range *servers {
			s.kill() // its output is complete
			outs[fmt.Sprintf("server-%d", i+1)] = s.out.String()
		}
		logs, _ := filepath.Glob(filepath.Join(dataDir, "agent", "replicas", "*", supervisor.LogFile))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			outs["supervisor-"+filepath.Base(filepath.Dir(l))] = string(b)
		}
		keepOutputs(t, outs)
	})
}

// killReplica SIGKILLs a replica's supervisor and its process group and
// leaves no exit record, as a machine crash would.
func killReplica(t *testing.T, dataDir, replicaID string) {
	t.Helper()
	pids, ok, err := supervisor.ReadPIDs(filepath.Join(dataDir, "agent", "replicas", replicaID))
	if err != nil || !ok || pids.Child == nil {
		t.Fatalf("reading pids of %s: ok=%v err=%v", replicaID, ok, err)
	}
	_ = syscall.Kill(pids.Supervisor.PID, syscall.SIGKILL)
	_ = syscall.Kill(-pids.Child.PID, syscall.SIGKILL)
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never appeared", path)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestExplainOnLiveServer: explain shows real reasons for a job that can
// never fit the 4-GPU node and for one that waits behind running work.
func TestExplainOnLiveServer(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t))
	big := strings.TrimSpace(s.gpufleet("run", "--gpus", "8", "--", "sleep", "60"))
	hog := strings.TrimSpace(s.gpufleet("run", "--gpus", "4", "--grace", "1s", "--", "sleep", "60"))
	s.waitJob(hog, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	waiter := strings.TrimSpace(s.gpufleet("run", "--gpus", "2", "--", "true"))

	explain := func(id string) api.Explanation {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var e api.Explanation
			if err := json.Unmarshal([]byte(s.gpufleet("explain", id, "-o", "json")), &e); err != nil {
				t.Fatal(err)
			}
			if e.Verdict != nil {
				return e
			}
			if time.Now().After(deadline) {
				t.Fatalf("explain %s never had a verdict: %+v", id, e)
			}
			time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
		}
	}
	reasons := func(e api.Explanation) string {
		var b strings.Builder
		for _, r := range e.Verdict.Reasons {
			fmt.Fprintf(&b, "%s: %s\n", r.Scope, r.Message)
		}
		return b.String()
	}
	e := explain(big)
	if !e.Pending || e.Queue != model.DefaultQueue || !strings.Contains(reasons(e), "node") || !strings.Contains(reasons(e), "8") {
		t.Errorf("explain %s: want a node verdict about 8 GPUs in the default queue, got %+v:\n%s", big, e, reasons(e))
	}
	e = explain(waiter)
	if e.Verdict.Position < 1 || !strings.Contains(reasons(e), "GPUs free") {
		t.Errorf("explain %s: want a queue position and free-GPU reasons, got %+v:\n%s", waiter, e, reasons(e))
	}
	table := s.gpufleet("explain", waiter)
	for _, want := range []string{"POSITION", "WHY NOT", "node/", waiter} {
		if !strings.Contains(table, want) {
			t.Errorf("explain table lacks %q:\n%s", want, table)
		}
	}
	s.gpufleet("jobs", "cancel", hog, big, waiter)
}

// TestArrayJob: an array job's tasks run with their index, and the
// array's id shows them all.
func TestArrayJob(t *testing.T) {
	s := startServer(t, t.TempDir(), freePort(t))
	id := strings.TrimSpace(s.gpufleet("run", "--array", "3", "--gpus", "0", "--", "sh", "-c", "echo task=$GPUFLEET_ARRAY_INDEX"))
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded || v.Array == nil || v.Array.Size != 3 || v.Array.States[model.JobSucceeded] != 3 {
		t.Fatalf("array job = %s %+v", v.State, v.Array)
	}
	for i := range 3 {
		if got, want := s.gpufleet("jobs", "logs", fmt.Sprintf("%s-%d", id, i)), fmt.Sprintf("task=%d\n", i); got != want {
			t.Errorf("task %d logged %q, want %q", i, got, want)
		}
	}
	if out := s.gpufleet("jobs", "list", "--all", "--array", id); strings.Count(out, id+"-") != 3 {
		t.Errorf("jobs list --array shows:\n%s", out)
	}

	// The array's own id: every task's lines, prefixed; --task picks one.
	want := "[task 0] task=0\n[task 1] task=1\n[task 2] task=2\n"
	if got := s.gpufleetOut("jobs", "logs", id); got != want {
		t.Errorf("jobs logs %s = %q, want %q", id, got, want)
	}
	followed := strings.SplitAfter(s.gpufleetOut("jobs", "logs", "-f", id), "\n")
	slices.Sort(followed) // -f interleaves whole lines as they come
	if got := strings.Join(followed, ""); got != want {
		t.Errorf("jobs logs -f %s = %q, want the lines of %q", id, got, want)
	}
	if got := s.gpufleetOut("jobs", "logs", id, "--task", "1"); got != "task=1\n" {
		t.Errorf("jobs logs --task 1 = %q", got)
	}
	out, err := s.gpufleetErr("jobs", "logs", id, "--task", "3")
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(out, "tasks 0 to 2") {
		t.Errorf("jobs logs --task 3 of a 3-task array: %v %q, want exit %d naming the tasks", err, out, exitUsage)
	}

	// A job that cannot start has no logs: nothing on stdout, and stderr
	// says why it waits.
	queued := strings.TrimSpace(s.gpufleetOut("run", "--gpus", "4", "--gpu", "A100", "--", "true"))
	defer s.gpufleet("jobs", "cancel", queued)
	cmd := s.gpufleetCmd("jobs", "logs", queued)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if got, err := cmd.Output(); err != nil || len(got) != 0 || !strings.Contains(stderr.String(), "has no logs yet") {
		t.Errorf("jobs logs of a queued job: %v, stdout %q, stderr %q; want nothing on stdout and a note why", err, got, stderr.String())
	}
}

// outputOf runs a CLI command and returns its standard output, which
// holds what scripts read (a job id, JSON); notes such as run
// --upload-workdir's summary go to standard error. When the command fails
// its standard error follows, for the error message.
func outputOf(cmd *exec.Cmd) (string, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// decodeItems reads a list command's JSON output, {"items": [...]}, and
// fails the test on any other shape (a bare array, a key named after the
// kind), which would otherwise decode as an empty list.
func decodeItems[T any](t testing.TB, out string) []T {
	t.Helper()
	var doc struct {
		Items *[]T `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Items == nil {
		t.Fatalf("want a list as {\"items\": [...]}, got (%v):\n%s", err, out)
	}
	return *doc.Items
}
