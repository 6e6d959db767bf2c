package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider/ssh/sshtest"
)

// TestSSHFleet is issue 16's SSH fleet done-when: a real sshd on loopback
// is the "host"; applying a pool of provider ssh makes the server log in,
// copy its own binary, and start the agent, which registers as the pool's
// node; a job runs there; applying the fleet without the pool stops the
// agent and deletes everything it put on the host.
func TestSSHFleet(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	dataDir, listen := t.TempDir(), freePort(t)
	s := startControlPlane(t, dataDir, listen, "--heartbeat-timeout", "5s", "--work-root", filepath.Join(sharedDir(t), "work"))

	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(keyFile, srv.ClientKey, 0o600); err != nil {
		t.Fatal(err)
	}
	// Workload users must traverse the install folder to their own.
	installDir := filepath.Join(sharedDir(t), "gpufleet-ssh")
	nodeDir := filepath.Join(installDir, "ssh-box")
	pool := fmt.Sprintf(`apiVersion: gpufleet.dev/v1
kind: NodePool
metadata: {name: lab}
spec:
  provider: ssh
  ssh:
    identityFile: %s
    installDir: %s
    port: %d
    hosts:
      - {name: ssh-box, address: %s, hostKey: %q, pricePerHour: 2.5}
`, keyFile, installDir, srv.Port, srv.Address, srv.HostKey)
	fleetDir := t.TempDir()
	poolFile := filepath.Join(fleetDir, "pool.yaml")
	if err := os.WriteFile(poolFile, []byte(pool), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", poolFile, "-m", "ssh pool")
	s.waitNodes(1)
	nodes := decodeItems[model.NodeInfo](t, s.gpufleet("nodes", "list", "-o", "json"))
	if n := nodes[0]; n.ID != "ssh-box" || n.Provider != "ssh" || n.Pool != "lab" || n.PricePerHour != 2.5 {
		t.Errorf("node = id %s provider %s pool %s price %v; want ssh-box, ssh, lab, 2.5", n.ID, n.Provider, n.Pool, n.PricePerHour)
	}
	if st, err := os.Stat(filepath.Join(nodeDir, "agent.env")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the agent's token file: %v (want mode 0600)", err)
	}

	id := strings.TrimSpace(s.gpufleet("run", "--gpus", "0", "--", "sh", "-c", `echo "hello, home $HOME"`))
	v := s.waitJob(id, func(v api.JobView) bool { return v.State.Terminal() }, "ended")
	if v.State != model.JobSucceeded || v.AttemptDetails[0].Replicas[0].NodeID != "ssh-box" {
		t.Fatalf("job = %s (%s) on %+v, want succeeded on ssh-box", v.State, v.Reason, v.AttemptDetails)
	}
	// The replica's home is in the installed agent's work root.
	if got := s.gpufleet("jobs", "logs", id); !strings.HasPrefix(got, "hello, home "+nodeDir+"/work/") {
		t.Errorf("job log %q: want the replica's home under %s/work", got, nodeDir)
	}

	// The pool goes: the next revision declares only a project.
	if err := os.Remove(poolFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fleetDir, "project.yaml"), []byte("apiVersion: gpufleet.dev/v1\nkind: Project\nmetadata: {name: demo}\nspec: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.gpufleet("apply", "-f", fleetDir, "-m", "drop the ssh pool")
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := os.Stat(nodeDir)
		left := processesIn(nodeDir)
		if os.IsNotExist(err) && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the pool went: %s stat %v, processes %v\nserver log:\n%s", nodeDir, err, left, s.out)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's work; bounded by the deadline
	}
	for _, n := range decodeItems[model.NodeInfo](t, s.gpufleet("nodes", "list", "-o", "json")) {
		if n.ID == "ssh-box" && n.State == model.NodeReady {
			t.Errorf("node ssh-box is still ready after its pool went")
		}
	}
	minted := 0
	for _, tk := range decodeItems[model.Token](t, s.gpufleet("tokens", "list", "-o", "json")) {
		if tk.Subject == "ssh-box" {
			minted++
			if !tk.Revoked {
				t.Errorf("the agent token of ssh-box is not revoked: %+v", tk)
			}
		}
	}
	if minted != 1 {
		t.Errorf("%d agent tokens minted for ssh-box, want 1", minted)
	}
}

// processesIn lists processes whose executable or working directory lies
// under dir.
func processesIn(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, l := range []string{"exe", "cwd"} {
			if target, err := os.Readlink(filepath.Join(p, l)); err == nil && strings.HasPrefix(target, dir+"/") {
				out = append(out, filepath.Base(p))
				break
			}
		}
	}
	return out
}
