package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/api/client"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// replica is one `gpufleet server` of an HA control plane.
type replica struct {
	id, dataDir, url string
	cmd              *exec.Cmd
	out              *testutil.SyncBuffer
}

// startReplica runs `gpufleet server` on the shared store, without a local
// agent, as replica id.
func startReplica(t *testing.T, id string, env []string, work string) *replica {
	t.Helper()
	listen := freePort(t)
	r := &replica{id: id, dataDir: t.TempDir(), url: "http://" + listen, out: &testutil.SyncBuffer{}}
	r.cmd = exec.Command(binary, "server", "--data-dir", r.dataDir, "--listen", listen, "--no-local-agent",
		"--replica-id", id, "--advertise-url", r.url, "--heartbeat-timeout", "30s", "--work-root", work)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.Env = append(cleanEnv(), env...)
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

// readyz returns the replica's /readyz status, role header and body.
func (r *replica) readyz() (int, string, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(r.url + "/readyz")
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Gpufleet-Role"), string(b)
}

// waitLeader waits until exactly one of rs answers /readyz as the leader
// and returns it, failing after within.
func waitLeader(t *testing.T, rs []*replica, within time.Duration) *replica {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var leaders []*replica
		for _, r := range rs {
			if code, role, _ := r.readyz(); code == 200 && role == "leader" {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) > 1 {
			t.Fatalf("%d replicas answer as leader", len(leaders))
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, r := range rs {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", r.id, lastOf(r.out.String(), 3000))
			}
			t.Fatalf("no leader within %s\n%s", within, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling separate processes; bounded by the deadline
	}
}

func metricValue(t *testing.T, url, token, series string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

func shJob(name, script string) []byte {
	m := map[string]any{"apiVersion": "gpufleet.dev/v1", "kind": "Job", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"resources": map[string]any{"gpus": 0}, "run": map[string]any{"command": []string{"sh", "-c", script}}}}
	b, _ := json.Marshal(m)
	return b
}

// TestFailover is issue 18's failover test, scaled to a small shared
// machine: PostgreSQL, three `gpufleet server` replicas and one agent that
// lists all three. Four long jobs run; a burst of 200 submissions with
// idempotency keys is under way when the leader is killed with SIGKILL. A
// follower leads within 10 s (5 s lease); every acknowledged submission is
// there, once; the running jobs kept running (one attempt, one start each)
// and every job finishes once. Then the new leader is frozen (SIGSTOP) past
// its lease: a third replica takes over, and the thawed one, fenced, exits
// without writing.
func TestFailover(t *testing.T) {
	dsn := pgtest.DSN(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	env := []string{"GPUFLEET_STORE=" + dsn, "GPUFLEET_SECRET_KEYS=" + hex.EncodeToString(key)}
	work, marks := workRoot(t), sharedDir(t)
	rs := []*replica{startReplica(t, "r1", env, work), startReplica(t, "r2", env, work), startReplica(t, "r3", env, work)}
	lead := waitLeader(t, rs, 60*time.Second)
	if code, role, body := rs[0].readyz(); lead != rs[0] && (code != 503 || role != "follower" || !strings.Contains(body, "the leader is "+lead.id)) {
		t.Errorf("a follower's /readyz = %d %s %q, want 503 naming %s", code, role, body, lead.id)
	}
	tokenB, err := os.ReadFile(filepath.Join(lead.dataDir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenB))
	if v := metricValue(t, lead.url, token, fmt.Sprintf(`gpufleet_leader{replica=%q}`, lead.id)); v != "1" {
		t.Errorf("gpufleet_leader on the leader = %q, want 1", v)
	}
	var urls []string
	for _, r := range rs {
		urls = append(urls, r.url)
	}
	all := strings.Join(urls, ",")
	c := client.New(all, token, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// One agent, told every replica (--server repeated).
	created, err := c.CreateToken(ctx, api.TokenCreate{Kind: model.TokenAgent, Subject: "node-a", TTL: model.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ag := &remoteAgent{t: t, node: "node-a", dataDir: t.TempDir(),
		args: []string{"--server", urls[0], "--server", urls[1] + "," + urls[2], "--fake-gpus", "1xH100", "--name", "node-a"},
		env:  append(cleanEnv(), "GPUFLEET_TOKEN="+created.Secret)}
	ag.start()
	waitReadyNodes(t, c, 1)

	long := make([]string, 4)
	for i := range long {
		v, err := c.SubmitJob(ctx, shJob(fmt.Sprintf("long-%d", i), fmt.Sprintf(`echo x >> %s/long-%d.starts; sleep 12`, marks, i)), client.SubmitOptions{IdempotencyKey: fmt.Sprintf("long-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		long[i] = v.ID
	}
	for _, id := range long {
		waitJobState(t, c, id, func(v *api.JobView) bool { return v.State == model.JobRunning }, "running")
	}

	// The burst: 8 clients, each submission retried with its key until
	// acknowledged; the leader dies once 50 are in.
	const burst = 200
	var (
		mu    sync.Mutex
		acked = map[string]string{} // key -> job id
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				key := fmt.Sprintf("burst-%d", i)
				for {
					v, err := submitOnce(ctx, c, key, shJob(key, fmt.Sprintf("echo x >> %s/%s.starts", marks, key)))
					if err == nil {
						mu.Lock()
						if prev, ok := acked[key]; ok && prev != v.ID {
							t.Errorf("key %s acknowledged as %s and as %s", key, prev, v.ID)
						}
						acked[key] = v.ID
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						t.Errorf("submitting %s: %v", key, err)
						return
					}
					time.Sleep(200 * time.Millisecond) // the control plane is failing over; retry with the same key
				}
			}
		}()
	}
	var killedAt time.Time
	for i := range burst {
		next <- i
		if i == 50 {
			if err := lead.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = lead.cmd.Wait()
			killedAt = time.Now()
		}
	}
	close(next)
	var rest []*replica
	for _, r := range rs {
		if r != lead {
			rest = append(rest, r)
		}
	}
	second := waitLeader(t, rest, 10*time.Second-time.Since(killedAt))
	t.Logf("failover: %s answers as leader %s after the kill (%s); its log:\n%s", second.id, time.Since(killedAt).Round(time.Millisecond), killedAt.UTC().Format(time.RFC3339Nano), leaderLog(second))
	wg.Wait()
	if len(acked) != burst {
		t.Fatalf("%d of %d submissions acknowledged", len(acked), burst)
	}
	if v := metricValue(t, second.url, token, "gpufleet_leader_changes_total"); v == "" || v == "0" {
		t.Errorf("gpufleet_leader_changes_total on the new leader = %q", v)
	}

	// Every acknowledged job is there, once; all finish, once.
	jobs, err := c.ListJobs(ctx, client.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != burst+len(long) {
		t.Errorf("%d jobs stored, want %d (one per idempotency key)", len(jobs), burst+len(long))
	}
	for _, id := range long {
		v := waitJobState(t, c, id, func(v *api.JobView) bool { return v.State.Terminal() }, "ended")
		if v.State != model.JobSucceeded || v.Attempts != 1 {
			t.Errorf("long job %s = %s after %d attempts (%s), want succeeded in one: it kept running across the failover", id, v.State, v.Attempts, v.Reason)
		}
	}
	for key, id := range acked {
		v := waitJobState(t, c, id, func(v *api.JobView) bool { return v.State.Terminal() }, "ended")
		if v.State != model.JobSucceeded || v.Attempts != 1 {
			t.Errorf("%s (%s) = %s after %d attempts", key, id, v.State, v.Attempts)
		}
	}
	for i := range long {
		checkStarts(t, filepath.Join(marks, fmt.Sprintf("long-%d.starts", i)))
	}
	for key := range acked {
		checkStarts(t, filepath.Join(marks, key+".starts"))
	}

	// Frozen past its lease, the leader is replaced; thawed, it is fenced.
	if err := second.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var third *replica
	for _, r := range rest {
		if r != second {
			third = r
		}
	}
	frozenAt := time.Now()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, role, _ := third.readyz(); code == 200 && role == "leader" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not take over from the frozen %s:\n%s", third.id, second.id, lastOf(third.out.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
	t.Logf("%s took over %s after %s froze", third.id, time.Since(frozenAt).Round(time.Millisecond), second.id)
	// A job submitted to the new leader runs and finishes once.
	var v *api.JobView
	for v == nil {
		// The client's remembered leader is frozen: the first try times
		// out and the next goes to another replica.
		if v, err = submitOnce(ctx, c, "after-freeze", shJob("after-freeze", fmt.Sprintf("echo x >> %s/after-freeze.starts", marks))); err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	if err := second.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- second.cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("the thawed old leader exited with %v, want a non-zero exit", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the thawed old leader %s is still running:\n%s", second.id, lastOf(second.out.String(), 6000))
	}
	if out := second.out.String(); !strings.Contains(out, "leadership lost") {
		t.Errorf("the thawed leader's log does not say it lost leadership:\n%s", lastOf(out, 4000))
	}
	if code, role, _ := third.readyz(); code != 200 || role != "leader" {
		t.Errorf("after the old leader thawed, %s answers %d %s", third.id, code, role)
	}
	waitJobState(t, c, v.ID, func(v *api.JobView) bool { return v.State == model.JobSucceeded }, "succeeded")
	checkStarts(t, filepath.Join(marks, "after-freeze.starts"))
}

// submitOnce is one try of a submission, bounded: a frozen server does not
// answer at all.
func submitOnce(ctx context.Context, c *client.Client, key string, manifest []byte) (*api.JobView, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.SubmitJob(ctx, manifest, client.SubmitOptions{IdempotencyKey: key})
}

// leaderLog is the replica's log lines about the election and readiness.
func leaderLog(r *replica) string {
	var b strings.Builder
	for _, l := range strings.Split(r.out.String(), "\n") {
		if strings.Contains(l, "lead") || strings.Contains(l, "gpufleet is up") || strings.Contains(l, "store open") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func lastOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func checkStarts(t *testing.T, path string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("%s: started %d times, want once", filepath.Base(path), n)
	}
}

func waitReadyNodes(t *testing.T, c *client.Client, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nodes, _ := c.Nodes(cctx)
		cancel()
		ready := 0
		for _, n := range nodes.Nodes {
			if n.State == model.NodeReady {
				ready++
			}
		}
		if ready == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes ready", ready, want)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
}

func waitJobState(t *testing.T, c *client.Client, id string, ok func(*api.JobView) bool, what string) *api.JobView {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := c.Job(cctx, id)
		cancel()
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never %s: %+v %v", id, what, v, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a separate process; bounded by the deadline
	}
}
