package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUsersNeverShareAUID: attempts get distinct users, replicas of one
// attempt share theirs, a user is handed out again only after Release,
// and another allocator on the machine (another agent) skips claimed ids.
func TestUsersNeverShareAUID(t *testing.T) {
	t.Parallel()
	claims := t.TempDir()
	a, err := NewUsers(5000, 3, claims, "agent-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	u1, _ := a.Acquire("att-1")
	u1b, _ := a.Acquire("att-1")
	u2, _ := a.Acquire("att-2")
	if u1 != u1b || u1 == u2 {
		t.Fatalf("att-1 got %v and %v, att-2 %v: want one user per attempt", u1, u1b, u2)
	}
	b, err := NewUsers(5000, 3, claims, "agent-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	u3, err := b.Acquire("att-3")
	if err != nil || u3 == u1 || u3 == u2 {
		t.Fatalf("another agent got %v (%v) while %v and %v are claimed", u3, err, u1, u2)
	}
	if _, err := b.Acquire("att-4"); err == nil {
		t.Fatal("a fourth attempt got a user from a range of three in use")
	}
	if a.Put("att-1") {
		t.Fatal("the first Put of two references was the last")
	}
	if !a.Put("att-1") {
		t.Fatal("the second Put was not the last")
	}
	a.Release("att-1")
	if u, err := b.Acquire("att-4"); err != nil || u != u1 {
		t.Fatalf("after release, another agent got %v (%v); want %v", u, err, u1)
	}
	// A restarted agent drops only its own stale claims.
	if _, err := NewUsers(5000, 3, claims, "agent-a", nil); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(claims)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"5000", "5002"}, names); diff != "" {
		t.Errorf("claims after agent-a restarts (-want +got):\n%s", diff)
	}
}

func TestRunArgsIsolate(t *testing.T) {
	t.Parallel()
	sb := Sandbox{Runtime: Container, User: &User{UID: 7, GID: 7}, Home: "/w/r1", Workdir: "/gpufleet/work",
		CheckpointDir: "/w/ck/j1", Env: map[string]string{"SECRET": "v4lue", "A": "1"},
		Data: []DataMount{{Entry: "e1", Host: "/w/datacache/e/e1", Target: "/gpufleet/work/data"}},
		Container: &ContainerSpec{Podman: "podman", OCIRuntime: "runc", Name: "gpufleet-r1", Image: "img:1",
			Network: "none", ReadOnly: true, NoFile: 1024, NProc: 512, CPU: 2, Memory: 1 << 30, Devices: []string{"/dev/nvidia0"}}}
	args := strings.Join(RunArgs(sb, []string{"python", "train.py"}), " ")
	for _, want := range []string{"--runtime runc run --rm --name gpufleet-r1", "--cap-drop=all", "--security-opt no-new-privileges",
		"--network none", "--volume /w/r1:/gpufleet:rw", "--volume /w/ck/j1:/gpufleet/checkpoint:rw", "--user 7:7",
		"--volume /w/datacache/e/e1:/gpufleet/work/data:ro",
		"--read-only", "--cpus 2", "--memory 1073741824b", "--device /dev/nvidia0", "--env A --env SECRET", "img:1 python train.py"} {
		if !strings.Contains(args, want) {
			t.Errorf("podman %s\nlacks %q", args, want)
		}
	}
	for _, never := range []string{"v4lue", "--privileged", "host"} {
		if strings.Contains(args, never) {
			t.Errorf("podman %s\nholds %q", args, never)
		}
	}
}

func TestGPUDevices(t *testing.T) {
	t.Parallel()
	dev, cdi := t.TempDir(), t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"} {
		os.WriteFile(filepath.Join(dev, n), nil, 0o600)
	}
	got := GPUDevices([]int{2, 0}, []string{"GPU-c", "GPU-a"}, dev, []string{cdi})
	want := []string{filepath.Join(dev, "nvidia2"), filepath.Join(dev, "nvidia0"), filepath.Join(dev, "nvidiactl"), filepath.Join(dev, "nvidia-uvm")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	os.WriteFile(filepath.Join(cdi, "nvidia.yaml"), nil, 0o644)
	if diff := cmp.Diff([]string{"nvidia.com/gpu=GPU-c", "nvidia.com/gpu=GPU-a"}, GPUDevices([]int{2, 0}, []string{"GPU-c", "GPU-a"}, dev, []string{cdi})); diff != "" {
		t.Errorf("with a CDI spec (-want +got):\n%s", diff)
	}
}

// The claim folder's parent is the work root's too (/var/lib/gpufleet):
// creating the claims first must not close it to workload users.
func TestClaimFolderLeavesItsParentPassable(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "var-lib-gpufleet")
	claims := filepath.Join(parent, "uids")
	if _, err := NewUsers(5000, 1, claims, "agent-a", nil); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]os.FileMode{parent: 0o711, claims: 0o700} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", dir, got, want)
		}
	}
}

// TestUsersKeepTheUIDsARestartedAgentStillUses: a restarted agent keeps
// the claims of the uids its earlier run has not released, until it adopts
// their replicas again: one whose replica ran on (it has processes) and
// one the caller says is in use (a replica that ended meanwhile, its folder
// not yet deleted), so that another agent on the machine cannot hand them
// to a second tenant meanwhile (who could read the folder, and whose end
// would kill the running replica when reclaiming the uid). The claim of a
// uid with nothing left is dropped.
func TestUsersKeepTheUIDsARestartedAgentStillUses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a process as a workload user needs root")
	}
	t.Parallel()
	claims := t.TempDir()
	const first = 4_000_000_000 // far from any uid in use on the machine
	a, err := NewUsers(first, 3, claims, "agent-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	running, _ := a.Acquire("att-running")
	ended, _ := a.Acquire("att-ended")
	released, _ := a.Acquire("att-released")
	replica := exec.Command("sleep", "60")
	replica.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(running.UID), Gid: uint32(running.GID)}}
	if err := replica.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Process.Kill(); replica.Wait() })

	// agent-a restarts; agent-b, beside it, starts attempts meanwhile.
	restarted, err := NewUsers(first, 3, claims, "agent-a", map[int]bool{ended.UID: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewUsers(first, 3, claims, "agent-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := b.Acquire("att-b"); err != nil || u != released {
		t.Fatalf("another agent got %v (%v), want the released %v", u, err, released)
	}
	if u, err := b.Acquire("att-b2"); err == nil {
		t.Fatalf("another agent got %v, a uid the restarted agent still uses", u)
	}
	if u, err := restarted.Acquire("att-new"); err == nil {
		t.Fatalf("the restarted agent handed a new attempt %v, a uid it still uses", u)
	}
	for att, u := range map[string]User{"att-running": running, "att-ended": ended} {
		if err := restarted.Hold(att, u); err != nil {
			t.Fatalf("adopting %s's user: %v", att, err)
		}
	}
}
