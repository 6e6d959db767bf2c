package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// TestServiceReplicaIsReachableOnlyThroughItsGate: on an isolating agent a
// service replica (busybox httpd, which checks no key) listens in a
// network namespace of its own; its port on the host is the agent's gate,
// which answers 401 without the key and forwards with it. A restarted
// agent opens the gate of the replica it adopts again, and the port is
// free once the replica has ended.
func TestServiceReplicaIsReachableOnlyThroughItsGate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workload users and network namespaces need root")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox (httpd) is not installed")
	}
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	passable := func(dir string) string {
		os.Chmod(dir, 0o711)
		os.Chmod(filepath.Dir(dir), 0o711)
		return dir
	}
	work := filepath.Join(passable(t.TempDir()), "work")
	users, err := runtime.NewUsers(3_000_000_100, 4, filepath.Join(t.TempDir(), "claims"), work, nil)
	if err != nil {
		t.Fatal(err)
	}
	isolated := func(c *Config) { c.Isolation = Isolation{WorkRoot: work, Users: users} }
	port := testutil.PortRun(t, 1)
	const key = "0123456789abcdef-replica-key"
	spec := shell("svc-r1", `echo ok > "$HOME/health"; echo listening; exec `+busybox+` httpd -f -p "$PORT" -h "$HOME"`)
	spec.Tags = map[string]string{model.TagService: "web"}
	spec.Env["PORT"] = strconv.Itoa(port)
	spec.Env[model.ServiceKeySecret] = key
	spec.SecretEnv = []string{model.ServiceKeySecret}
	cp.setDesired(spec)
	stop := startAgent(t, newTestAgent(t, cp, dir, isolated))
	waitPhase(t, cp, "svc-r1", agentapi.PhaseRunning)

	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	// get answers 0 while nothing listens (the gate not open yet).
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	served := func() bool {
		code, body := get("Bearer " + key)
		return code == 200 && body == "ok"
	}
	waitFor(t, "the replica served through its gate", served)
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Fatalf("without the key: %d, want 401", code)
	}
	if code, _ := get("Bearer not-the-key"); code != http.StatusUnauthorized {
		t.Fatalf("with another key: %d, want 401", code)
	}
	pids, _, err := supervisor.ReadPIDs(filepath.Join(dir, replicasDir, "svc-r1"))
	if err != nil || pids.Child == nil {
		t.Fatalf("reading the replica's pid: %v", err)
	}
	host, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", os.Getppid()))
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pids.Child.PID)); err != nil || ns == host {
		t.Fatalf("the replica's network namespace is the host's (%s, %v)", ns, err)
	}

	// While the agent is down nothing listens on the port (the replica is
	// in its own namespace); started again, it opens the gate once more.
	stop()
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		c.Close()
		t.Fatal("with the agent stopped, the replica's port still answers on the host")
	}
	startAgent(t, newTestAgent(t, cp, dir, isolated))
	waitFor(t, "the adopted replica served through its gate again", served)

	spec.Stop = true
	cp.setDesired(spec)
	waitPhase(t, cp, "svc-r1", agentapi.PhaseExited)
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatalf("the port is still taken after the replica ended: %v", err)
	}
	ln.Close()
}
