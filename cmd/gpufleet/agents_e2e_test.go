package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// startControlPlane starts `gpufleet up --no-local-agent` with extra flags
// and waits until its API answers.
func startControlPlane(t *testing.T, dataDir, listen string, args ...string) *serverProc {
	t.Helper()
	s := &serverProc{t: t, dataDir: dataDir, listen: listen, out: &testutil.SyncBuffer{}}
	s.cmd = exec.Command(binary, append([]string{"up", "--data-dir", dataDir, "--listen", listen, "--no-local-agent"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = cleanEnv()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dataDir, serverFile)); err == nil {
			if _, err := s.gpufleetErr("version"); err == nil {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up:\n%s", s.out)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's readiness; bounded by the deadline
	}
}

// remoteAgent is a `gpufleet agent` process with its own data dir.
type remoteAgent struct {
	t       *testing.T
	node    string
	dataDir string
	// cacheDir is its data cache, where a test set --data-cache-dir.
	cacheDir string
	args     []string
	env      []string
	cmd      *exec.Cmd
	out      *testutil.SyncBuffer
}

// startAgent creates an agent token for node on s and starts an agent with it.
func startAgent(t *testing.T, s *serverProc, node, gpus string) *remoteAgent {
	t.Helper()
	var created api.TokenCreated
	if err := json.Unmarshal([]byte(s.gpufleet("tokens", "create", node, "--kind", "agent", "--ttl", "1h", "-o", "json")), &created); err != nil {
		t.Fatal(err)
	}
	a := &remoteAgent{
		t: t, node: node, dataDir: t.TempDir(),
		args: []string{"--server", "http://" + s.listen, "--fake-gpus", gpus, "--name", node},
		// The token travels in the environment, as the README advises.
		env: append(cleanEnv(), "GPUFLEET_TOKEN="+created.Secret),
	}
	a.start()
	return a
}

func (a *remoteAgent) start() {
	a.t.Helper()
	a.out = &testutil.SyncBuffer{}
	a.cmd = exec.Command(binary, append([]string{"agent", "--data-dir", a.dataDir}, a.args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	a.cmd.Env = a.env
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	cmd := a.cmd
	a.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// kill9 kills the agent process alone: its supervisors and workloads live on.
func (a *remoteAgent) kill9() {
	a.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		a.t.Fatal(err)
	}
	_ = a.cmd.Wait()
}

func (a *remoteAgent) replicaDir(jobID string, attempt, rank int) string {
	return filepath.Join(a.dataDir, "agent", "replicas", model.ReplicaID(model.AttemptID(jobID, attempt), rank))
}

// waitNodes waits until the server lists want nodes as ready.
func (s *serverProc) waitNodes(want int) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ready := 0
		for _, n := range decodeItems[model.NodeInfo](s.t, s.gpufleet("nodes", "list", "-o", "json")) {
			if n.State == model.NodeReady {
				ready++
			}
		}
		if ready == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d of %d nodes ready\nserver log:\n%s", ready, want, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
}

// TestRemoteAgents is issue 4's done-when: three `gpufleet agent` processes
// on loopback plus the server; the server is killed with SIGKILL during a
// run and restarted; every workload finishes exactly once and every log is
// complete, a gang's per rank. Then a node whose agent dies is lost after
// the heartbeat timeout, its job requeues, and the restarted agent stops
// the orphaned replica and runs the new attempt.
func TestRemoteAgents(t *testing.T) {
	dataDir, listen, marks := t.TempDir(), freePort(t), sharedDir(t)
	flags := []string{"--heartbeat-timeout", "5s"}
	s := startControlPlane(t, dataDir, listen, flags...)
	agents := []*remoteAgent{
		startAgent(t, s, "node-a", "2xH100"),
		startAgent(t, s, "node-b", "2xH100"),
		startAgent(t, s, "node-c", "3xH100"),
	}
	s.waitNodes(3)

	// An uploaded workdir reaches whichever node runs the job.
	work := sharedDir(t)
	if err := os.MkdirAll(filepath.Join(work, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "src", "hello.txt"), []byte("hello from the workdir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// run prints the upload summary on stderr, the job id alone on stdout.
	uploaded := strings.TrimSpace(s.gpufleetOut("run", "--upload-workdir", "--workdir", work, "--gpus", "0", "--", "sh", "-c", "cat src/hello.txt"))
	if v := s.waitJob(uploaded, func(v api.JobView) bool { return v.State.Terminal() }, "ended"); v.State != model.JobSucceeded {
		t.Fatalf("job with an uploaded workdir = %s (%s)", v.State, v.Reason)
	}
	if got := s.gpufleet("jobs", "logs", uploaded); got != "hello from the workdir\n" {
		t.Fatalf("job with an uploaded workdir logged %q", got)
	}

	// Each workload counts its starts, writes part of its output before the
	// server dies and the rest after, and ends when released.
	const lines = 1500
	body := func(name string) string {
		return fmt.Sprintf(`echo $$ >> %[1]s/%[2]s-$RANK.starts
echo "rank $RANK of $WORLD_SIZE master $MASTER_ADDR"
seq -f "%[2]s rank $RANK line %%g" 1 %[3]d
while [ ! -e %[1]s/release ]; do sleep 0.05; done
seq -f "%[2]s rank $RANK after %%g" 1 %[3]d`, marks, name, lines)
	}
	want := func(name string, rank, world int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "rank %d of %d master 127.0.0.1\n", rank, world)
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&b, "%s rank %d line %d\n", name, rank, i)
		}
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&b, "%s rank %d after %d\n", name, rank, i)
		}
		return b.String()
	}
	type submitted struct {
		id, name string
		world    int
	}
	jobs := []submitted{{name: "gang", world: 3}, {name: "solo-1", world: 1}, {name: "solo-2", world: 1}, {name: "solo-3", world: 1}}
	for i, j := range jobs {
		args := []string{"run", "--name", j.name, "--gpus", "0"}
		if j.world > 1 {
			args = []string{"run", "--name", j.name, "--replicas", "3", "--gpus", "2"}
		}
		jobs[i].id = strings.TrimSpace(s.gpufleet(append(args, "--", "sh", "-c", body(j.name))...))
	}
	for _, j := range jobs {
		s.waitJob(j.id, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	}
	gang := s.job(jobs[0].id)
	nodesOfGang := map[string]bool{}
	for _, r := range gang.AttemptDetails[0].Replicas {
		nodesOfGang[r.NodeID] = true
	}
	if len(nodesOfGang) != 3 {
		t.Fatalf("the gang runs on %v, want one replica on each of the three nodes", nodesOfGang)
	}

	// kill -9 the server mid-run; agent node-b dies too. While they are
	// down every workload is released and finishes.
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	agents[1].kill9()
	if err := os.WriteFile(filepath.Join(marks, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		for _, j := range jobs {
			for rank := range j.world {
				dir := a.replicaDir(j.id, 1, rank)
				if _, err := os.Stat(dir); err == nil {
					waitFile(t, filepath.Join(dir, supervisor.ExitFile))
				}
			}
		}
	}

	s = startControlPlane(t, dataDir, listen, flags...)
	agents[1].start() // re-adopts its finished replicas and reports them
	for _, j := range jobs {
		v := s.waitJob(j.id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
		if v.State != model.JobSucceeded || v.Attempts != 1 {
			t.Errorf("%s = %s after %d attempts (%s), want succeeded in one", j.name, v.State, v.Attempts, v.Reason)
		}
		for rank := range j.world {
			starts, _ := os.ReadFile(filepath.Join(marks, fmt.Sprintf("%s-%d.starts", j.name, rank)))
			if n := strings.Count(string(starts), "\n"); n != 1 {
				t.Errorf("%s rank %d started %d times, want once", j.name, rank, n)
			}
			got := s.gpufleet("jobs", "logs", j.id, "--rank", fmt.Sprint(rank))
			if w := want(j.name, rank, j.world); got != w {
				t.Errorf("%s rank %d: log of %d bytes, want %d; it ends %q", j.name, rank, len(got), len(w), tail(got))
			}
		}
	}
	s.waitNodes(3)

	// node-c's agent dies while it runs the only job that fits it alone
	// (3 GPUs): past the heartbeat timeout the node is lost and the job
	// requeues; it can run only on node-c, whose restarted agent stops the
	// orphaned replica.
	pinned := strings.TrimSpace(s.gpufleet("run", "--name", "pinned", "--gpus", "3", "--grace", "1s", "--",
		"sh", "-c", fmt.Sprintf(`umask 0; echo $$ >> %[1]s/pinned.starts; echo "attempt $GPUFLEET_ATTEMPT"; while [ ! -e %[1]s/release-pinned ]; do sleep 0.05; done`, marks)))
	s.waitJob(pinned, func(v api.JobView) bool { return v.State == model.JobRunning }, "ran")
	agents[2].kill9()
	v := s.waitJob(pinned, func(v api.JobView) bool { return v.State == model.JobQueued }, "requeued after its node was lost")
	if a := v.AttemptDetails[0]; a.State != model.AttemptLost || a.Reason != model.ReasonNodeLost {
		t.Fatalf("first attempt = %s (%s), want lost: %s", a.State, a.Reason, model.ReasonNodeLost)
	}
	agents[2].start()
	s.waitJob(pinned, func(v api.JobView) bool { return v.Attempts == 2 && v.State == model.JobRunning }, "ran again on the returned node")
	exit := filepath.Join(agents[2].replicaDir(pinned, 1, 0), supervisor.ExitFile)
	waitFile(t, exit) // the orphan of attempt 1 is stopped, not left running
	if err := os.WriteFile(filepath.Join(marks, "release-pinned"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	v = s.waitJob(pinned, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded {
		t.Fatalf("pinned = %s (%s), want succeeded", v.State, v.Reason)
	}
	if got := s.gpufleet("jobs", "logs", pinned); got != "attempt 2\n" {
		t.Errorf("pinned's log = %q, want its second attempt's", got)
	}
}

func tail(s string) string {
	if len(s) > 80 {
		return s[len(s)-80:]
	}
	return s
}
