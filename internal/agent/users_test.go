package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// TestAttemptsRunAsTheirOwnUsers: with workload users, two attempts run at
// once as two users, in folders outside the agent's directory that the
// other cannot read; once the server has an attempt's end, what it left
// running is killed and its checkpoint folder is taken back before its
// user is handed out again.
func TestAttemptsRunAsTheirOwnUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workload users need root")
	}
	t.Parallel()
	cp := newFakeControlPlane()
	dir := agentDir(t)
	// Workload users must pass through the folders above their own.
	passable := func(dir string) string {
		os.Chmod(dir, 0o711)
		os.Chmod(filepath.Dir(dir), 0o711)
		return dir
	}
	work := filepath.Join(passable(t.TempDir()), "work")
	users, err := runtime.NewUsers(3_000_000_000, 4, filepath.Join(t.TempDir(), "claims"), work, nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(passable(t.TempDir()), "gate")
	ck := func(job string) string { return filepath.Join(work, "checkpoints", job) }
	a := shell("a", `id -u; echo "$HOME"; echo secret-a > "$GPUFLEET_CHECKPOINT_DIR/a"; setsid sleep 300 & while [ ! -e `+gate+` ]; do sleep 0.05; done`)
	a.JobID, a.AttemptID, a.Env["GPUFLEET_CHECKPOINT_DIR"] = "job-a", "job-a-a1", ck("job-a")
	b := shell("b", `id -u; cat `+ck("job-a")+`/a 2>&1; ls `+work+`/replicas 2>&1; ls `+dir+` 2>&1`)
	b.JobID, b.AttemptID, b.Env["GPUFLEET_CHECKPOINT_DIR"] = "job-b", "job-b-a1", ck("job-b")
	cp.setDesired(a, b)
	startAgent(t, newTestAgent(t, cp, dir, func(c *Config) { c.Isolation = Isolation{WorkRoot: work, Users: users} }))

	waitPhase(t, cp, "b", agentapi.PhaseExited)
	waitFor(t, "a's first lines shipped", func() bool { return strings.Count(string(cp.logOf("a").data), "\n") >= 2 })
	la, lb := string(cp.logOf("a").data), endLogOf(t, cp, "b")
	uidA, uidB := strings.SplitN(la, "\n", 2)[0], strings.SplitN(lb, "\n", 2)[0]
	if uidA == "0" || uidB == "0" || uidA == uidB || !strings.HasPrefix(uidA, "3000000") {
		t.Fatalf("uids a=%q b=%q: want two distinct workload users\nlog a:\n%s\nlog b:\n%s", uidA, uidB, la, lb)
	}
	if !strings.Contains(la, filepath.Join(work, "replicas", "a")) {
		t.Errorf("a's HOME is not its folder under the work root:\n%s", la)
	}
	if strings.Contains(lb, "secret-a") || strings.Contains(lb, lockFile) || strings.Contains(lb, nodeIDFile) || strings.Count(lb, "Permission denied") != 3 {
		t.Errorf("b read what is a's or the agent's:\n%s", lb)
	}

	touch(t, gate)
	waitPhase(t, cp, "a", agentapi.PhaseExited)
	cp.forget("a")
	cp.setDesired(b)
	waitFor(t, "a's user reclaimed", func() bool {
		fi, err := os.Stat(ck("job-a"))
		return err == nil && fi.Sys().(*syscall.Stat_t).Uid == 0
	})
	uid, _ := strconv.Atoi(uidA)
	if pids, _ := runtime.ProcessesOf(uid); len(pids) > 0 {
		t.Errorf("processes %v of a's user survive its end", pids)
	}
	if _, err := os.Stat(filepath.Join(work, "replicas", "a")); !os.IsNotExist(err) {
		t.Errorf("a's folder is still there: %v", err)
	}
}

func endLogOf(t *testing.T, cp *fakeControlPlane, id string) string {
	t.Helper()
	l, ok := cp.endLog(id)
	if !ok {
		t.Fatalf("no end of %s's log", id)
	}
	return string(l.data)
}

// TestFolderOwnersNamesTheWorkloadUsersOfUnreleasedReplicas: the uids a
// restarted agent keeps claimed (runtime.NewUsers) are those owning a
// replica's folder; folders of the agent's own are not a workload's.
func TestFolderOwnersNamesTheWorkloadUsersOfUnreleasedReplicas(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a folder to a workload user needs root")
	}
	dir := t.TempDir()
	for name, uid := range map[string]int{"r-running": 4_000_000_010, "r-ended": 4_000_000_011, "r-unowned": os.Getuid()} {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[int]bool{4_000_000_010: true, 4_000_000_011: true}, folderOwners(dir)); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	if got := folderOwners(filepath.Join(dir, "none")); len(got) != 0 {
		t.Errorf("a missing folder has owners %v", got)
	}
}
