package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/providertest"
	"github.com/gpufleet/gpufleet/internal/provider/ssh"
	"github.com/gpufleet/gpufleet/internal/provider/ssh/sshtest"
)

// keys is a vault of private keys by reference.
type keys map[model.SecretRef][]byte

func (k keys) OpenSecret(_ context.Context, ref model.SecretRef) ([]byte, error) {
	if v, ok := k[ref]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("secret %s: not found", ref)
}

const keyRef = model.SecretRef("ops/SSH_KEY")

// fakeAgent is the "gpufleet" binary the unit tests install: it records
// its arguments and environment, starts a replica-like process of its own
// session working in the node's work folder (as a supervisor would), and
// stays up like the agent does.
const fakeAgent = `#!/bin/sh
d=$(dirname "$(dirname "$0")")
printf '%s\n' "$@" > "$d/args"
env | grep '^GPUFLEET_' | sort > "$d/env"
setsid sh -c 'cd "$1/work" && exec sleep 1000' replica "$d" < /dev/null > /dev/null 2>&1 &
exec sleep 1000
`

type fixture struct {
	srv   *sshtest.Server
	inst  *ssh.Installer
	host  ssh.Host
	root  string // the install dir
	agent string // the fake binary
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := sshtest.Start(t, sshtest.Options{})
	dir := t.TempDir()
	bin := filepath.Join(dir, "gpufleet")
	if err := os.WriteFile(bin, []byte(fakeAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "install")
	f := &fixture{
		srv:   srv,
		inst:  &ssh.Installer{Dialer: &ssh.Dialer{Keys: keys{keyRef: srv.ClientKey}}, Binary: bin},
		root:  root,
		agent: bin,
		host: ssh.Host{Pool: "lab", Name: "box-1", Address: srv.Address, Port: srv.Port, User: "root", Identity: keyRef,
			HostKey: srv.HostKey, InstallDir: root, Region: ssh.Region},
	}
	t.Cleanup(func() { _ = f.inst.Uninstall(context.Background(), f.host) })
	return f
}

// ctxT bounds a whole test's SSH calls. A test makes many round trips
// (install, status, reinstall, uninstall), each a few commands over SSH,
// and CI runs the end-to-end package beside it on 2 cores: one test once
// needed 81 s there.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestProbeCPUOnlyAndGPUs(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	facts, err := f.inst.Probe(ctx, f.host)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	host, _ := os.Hostname()
	if facts.Hostname != host || facts.CPU < 1 || facts.Memory < model.MiB || len(facts.GPUs) != 0 {
		t.Errorf("Probe of a machine without nvidia-smi = %+v, want this machine's hostname %q, CPUs, memory and no GPUs", facts, host)
	}

	// An nvidia-smi that prints what eight H100s print (the gpu package's
	// recorded output).
	smi := filepath.Join(t.TempDir(), "nvidia-smi")
	csv, err := filepath.Abs("testdata/nvidia-smi-h100x8.csv")
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1 $2\" = '--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits' ] || exit 9\ncat %s\n", csv)
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.inst.NvidiaSMI = smi
	facts, err = f.inst.Probe(ctx, f.host)
	if err != nil {
		t.Fatalf("Probe with GPUs: %v", err)
	}
	if len(facts.GPUs) != 8 || facts.GPUs[7].Index != 7 || facts.GPUs[0].Model != "H100" || facts.GPUs[0].Memory != 81559*model.MiB {
		t.Errorf("GPUs = %+v, want 8 H100 of 81559 MiB", facts.GPUs)
	}

	// nvidia-smi that fails (a driver without GPUs) means no GPUs.
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if facts, err = f.inst.Probe(ctx, f.host); err != nil || len(facts.GPUs) != 0 {
		t.Errorf("Probe with a failing nvidia-smi = %+v, %v; want no GPUs", facts.GPUs, err)
	}
}

func TestHostKeyMismatchRefused(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	_, other := sshtest.Keygen(t, filepath.Join(t.TempDir(), "other"))
	h := f.host
	h.HostKey = other
	_, err := f.inst.Probe(ctx, h)
	if !errors.Is(err, ssh.ErrHostKey) {
		t.Fatalf("Probe with another pinned key: %v, want ErrHostKey", err)
	}
	for _, want := range []string{"presented ssh-ed25519 key SHA256:", "but the pool pins", "hostKey"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// known_hosts: the right file is trusted; one without the host and
	// one with another key for it are not.
	h.HostKey, h.KnownHosts = "", f.srv.KnownHosts
	if _, err := f.inst.Probe(ctx, h); err != nil {
		t.Errorf("Probe vouched for by known_hosts: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(empty, []byte("[10.9.9.9]:22 "+f.srv.HostKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.KnownHosts = empty
	if _, err := f.inst.Probe(ctx, h); !errors.Is(err, ssh.ErrHostKey) || !strings.Contains(err.Error(), "is not in") {
		t.Errorf("Probe of a host known_hosts does not list: %v, want ErrHostKey saying it is not in the file", err)
	}
	wrong := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(wrong, []byte(fmt.Sprintf("[%s]:%d %s\n", f.srv.Address, f.srv.Port, other)), 0o600); err != nil {
		t.Fatal(err)
	}
	h.KnownHosts = wrong
	if _, err := f.inst.Probe(ctx, h); !errors.Is(err, ssh.ErrHostKey) || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("Probe of a host whose known_hosts key differs: %v, want ErrHostKey saying it does not match", err)
	}
	h.KnownHosts = ""
	if _, err := f.inst.Probe(ctx, h); !errors.Is(err, ssh.ErrHostKey) {
		t.Errorf("Probe with neither a pinned key nor known_hosts: %v, want ErrHostKey", err)
	}
	// Nothing was installed past a refused key.
	if _, err := os.Stat(f.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("install dir after refused connections: %v, want none", err)
	}
}

func TestWrongKeyRefused(t *testing.T) {
	f := newFixture(t)
	priv, _ := sshtest.Keygen(t, filepath.Join(t.TempDir(), "stranger"))
	inst := &ssh.Installer{Dialer: &ssh.Dialer{Keys: keys{keyRef: priv}}, Binary: f.agent}
	_, err := inst.Probe(ctxT(t), f.host)
	if !errors.Is(err, ssh.ErrAuth) {
		t.Fatalf("Probe with an unauthorized key: %v, want ErrAuth", err)
	}
	if !strings.Contains(err.Error(), string(keyRef)) || !strings.Contains(err.Error(), "authorized_keys") {
		t.Errorf("error %q should name the secret and authorized_keys", err)
	}
	inst.Dialer.Keys = keys{keyRef: []byte("not a key")}
	if _, err := inst.Probe(ctxT(t), f.host); err == nil || !strings.Contains(err.Error(), "not an unencrypted private key") {
		t.Errorf("Probe with a secret that is no key: %v", err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond for up to 30s (a loaded CI machine is slow to spawn).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// processesUnder lists the pids of processes whose executable or working
// directory lies under dir.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
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

func TestInstallIdempotentThenUninstall(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	tokens := 0
	a := ssh.Agent{Server: "http://127.0.0.1:7777", Args: []string{"--pool", "lab"},
		Token: func(context.Context) (string, error) { tokens++; return fmt.Sprintf("gfa_token%d", tokens), nil }}
	if _, err := f.inst.Install(ctx, f.host, a); err != nil {
		t.Fatalf("Install: %v", err)
	}
	d := f.host.Dir()
	waitFor(t, "the agent's args", func() bool { _, err := os.Stat(d + "/env"); return err == nil })
	wantArgs := []string{"agent", "--data-dir", d + "/data", "--work-root", d + "/work", "--name", "box-1", "--region", "owned", "--pool", "lab"}
	if diff := cmp.Diff(wantArgs, strings.Fields(read(t, d+"/args"))); diff != "" {
		t.Errorf("agent args (-want +got):\n%s", diff)
	}
	if got := read(t, d+"/env"); got != "GPUFLEET_SERVER=http://127.0.0.1:7777\nGPUFLEET_TOKEN=gfa_token1\n" {
		t.Errorf("agent env = %q", got)
	}
	if st, err := os.Stat(d + "/agent.env"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("agent.env: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	running, present, err := f.inst.Status(ctx, f.host)
	if err != nil || !running || !present {
		t.Fatalf("Status after Install = running %v, present %v, %v", running, present, err)
	}
	pid := strings.TrimSpace(read(t, d+"/agent.pid"))

	// Again: nothing changes, no new token, same supervisor.
	if _, err := f.inst.Install(ctx, f.host, a); err != nil {
		t.Fatalf("second Install: %v", err)
	}
	if tokens != 1 || strings.TrimSpace(read(t, d+"/agent.pid")) != pid {
		t.Errorf("an install that matches restarted the agent: %d tokens, pid %s then %s", tokens, pid, read(t, d+"/agent.pid"))
	}
	// A stopped agent is started again, with a fresh token.
	if err := killGroup(pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the supervisor to stop", func() bool { r, _, _ := f.inst.Status(ctx, f.host); return !r })
	if _, err := f.inst.Install(ctx, f.host, a); err != nil {
		t.Fatalf("Install after the agent stopped: %v", err)
	}
	if r, _, _ := f.inst.Status(ctx, f.host); !r || tokens != 2 {
		t.Errorf("after reinstall: running %v, %d tokens; want running, 2", r, tokens)
	}
	// The agent (run in its folder) and its replica-like process.
	waitFor(t, "the agent and its replica", func() bool { return len(processesUnder(t, d)) >= 2 })

	if err := f.inst.Uninstall(ctx, f.host); err != nil {
		t.Fatalf("Uninstall: %v", err)
	}
	if left := processesUnder(t, d); len(left) > 0 {
		t.Errorf("processes left after Uninstall: %v", left)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Uninstall: %v, want gone", d, err)
	}
	if running, present, err := f.inst.Status(ctx, f.host); err != nil || running || present {
		t.Errorf("Status after Uninstall = running %v, present %v, %v", running, present, err)
	}
	// Uninstalling a clean host is success.
	if err := f.inst.Uninstall(ctx, f.host); err != nil {
		t.Errorf("second Uninstall: %v", err)
	}
}

func killGroup(pid string) error {
	var n int
	if _, err := fmt.Sscan(pid, &n); err != nil {
		return err
	}
	return syscall.Kill(-n, syscall.SIGKILL)
}

func TestProxyJump(t *testing.T) {
	f := newFixture(t)
	bastion := sshtest.Start(t, sshtest.Options{})
	inst := &ssh.Installer{Dialer: &ssh.Dialer{Keys: keys{keyRef: f.srv.ClientKey, "ops/BASTION": bastion.ClientKey}}, Binary: f.agent}
	h := f.host
	h.Jump = &ssh.Jump{Address: bastion.Address, Port: bastion.Port, User: "root", Identity: "ops/BASTION", HostKey: bastion.HostKey}
	if _, err := inst.Probe(ctxT(t), h); err != nil {
		t.Fatalf("Probe through a bastion: %v", err)
	}
	h.Jump.HostKey = f.srv.HostKey // not the bastion's
	if _, err := inst.Probe(ctxT(t), h); !errors.Is(err, ssh.ErrHostKey) || !strings.Contains(err.Error(), "bastion") {
		t.Errorf("Probe through a bastion with the wrong pinned key: %v, want ErrHostKey for the bastion", err)
	}
}

// enroller records enrolments.
type enroller struct {
	mu       sync.Mutex
	enrolled map[string]int
	retired  []string
}

func (e *enroller) Enroll(_ context.Context, pool, node string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.enrolled == nil {
		e.enrolled = map[string]int{}
	}
	e.enrolled[pool+"/"+node]++
	return "gfa_" + node, nil
}

func (e *enroller) Unenroll(_ context.Context, pool, node string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retired = append(e.retired, pool+"/"+node)
	return nil
}

func pool(name, root string, srv *sshtest.Server, hosts ...string) *model.NodePool {
	s := &model.SSHPoolSettings{IdentityRef: keyRef, InstallDir: root, Port: srv.Port}
	for _, h := range hosts {
		s.Hosts = append(s.Hosts, model.SSHHost{Name: h, Address: srv.Address, HostKey: srv.HostKey, PricePerHour: 1.5})
	}
	p := &model.NodePool{Name: name, Spec: model.NodePoolSpec{Provider: model.ProviderSSH, SSH: s}, Revision: 1}
	if fe := p.Spec.Validate("spec", nil); len(fe) > 0 {
		panic(fe.Err())
	}
	return p
}

func TestFleetInstallsRemovesAndRemembers(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	smi := filepath.Join(t.TempDir(), "nvidia-smi")
	csv, _ := filepath.Abs("testdata/nvidia-smi-h100x8.csv")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\ncat "+csv+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.inst.NvidiaSMI = smi
	state := filepath.Join(t.TempDir(), "ssh-fleet.json")
	en := &enroller{}
	fl, err := ssh.NewFleet(ssh.FleetOptions{Installer: f.inst, Enroller: en, Server: "http://127.0.0.1:7777", StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	fl.SetPools([]*model.NodePool{pool("lab", f.root, f.srv, "box-1", "box-2")}, time.Now())
	fl.Reconcile(ctx)
	for _, s := range fl.Status() {
		if !s.Installed || s.Error != "" || len(s.Facts.GPUs) != 8 {
			t.Errorf("host %s after Reconcile: %+v", s.Host.Name, s)
		}
	}
	for _, n := range []string{"box-1", "box-2"} {
		d := filepath.Join(f.root, n)
		waitFor(t, n+"'s agent", func() bool { _, err := os.Stat(d + "/args"); return err == nil })
		if args := read(t, d+"/args"); !strings.Contains(args, "--provider\nssh\n--pool\nlab\n--price-per-hour\n1.5\n") {
			t.Errorf("%s args:\n%s", n, args)
		}
	}
	offers, _ := fl.Offers(ctx)
	if len(offers) != 1 || offers[0].GPUCount != 8 || offers[0].GPU != "H100" || offers[0].PricePerHour != 1.5 {
		t.Errorf("Offers = %+v, want one 8xH100 owned offer at 1.5", offers)
	}

	t.Run("conformance", func(t *testing.T) { providertest.Run(t, fl, providertest.Options{}) })

	// box-2 leaves: unenrolled and removed; box-1 stays as it was.
	pid1 := read(t, filepath.Join(f.root, "box-1", "agent.pid"))
	fl.SetPools([]*model.NodePool{pool("lab", f.root, f.srv, "box-1")}, time.Now())
	fl.Reconcile(ctx)
	if diff := cmp.Diff([]string{"lab/box-2"}, en.retired); diff != "" {
		t.Errorf("unenrolled (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(f.root, "box-2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("box-2's folder after it left the pool: %v", err)
	}
	if got := read(t, filepath.Join(f.root, "box-1", "agent.pid")); got != pid1 || en.enrolled["lab/box-1"] != 1 {
		t.Errorf("box-1 was reinstalled: pid %s then %s, %d tokens", pid1, got, en.enrolled["lab/box-1"])
	}

	// A new server with the same state file and no pools (the pool was
	// deleted while it was down) still removes box-1.
	fl2, err := ssh.NewFleet(ssh.FleetOptions{Installer: f.inst, Enroller: en, Server: "http://127.0.0.1:7777", StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	fl2.SetPools(nil, time.Now())
	fl2.Reconcile(ctx)
	if diff := cmp.Diff([]string{"lab/box-2", "lab/box-1"}, en.retired); diff != "" {
		t.Errorf("unenrolled (-want +got):\n%s", diff)
	}
	if left := processesUnder(t, f.root); len(left) > 0 {
		t.Errorf("processes left after the pool went: %v", left)
	}
	if _, err := os.Stat(filepath.Join(f.root, "box-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("box-1's folder after its pool went: %v", err)
	}
	if got := read(t, state); strings.TrimSpace(got) != "[]" {
		t.Errorf("state file after all hosts went: %s", got)
	}
}

func TestFleetFixedCapacity(t *testing.T) {
	fl, err := ssh.NewFleet(ssh.FleetOptions{Installer: &ssh.Installer{Dialer: &ssh.Dialer{}}, Enroller: &enroller{}, Server: "http://x:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Launch(context.Background(), provider.LaunchRequest{}); !errors.Is(err, provider.ErrFixedCapacity) {
		t.Errorf("Launch: %v", err)
	}
}

func TestIdentityFile(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, f.srv.ClientKey, 0o644); err != nil {
		t.Fatal(err)
	}
	inst := &ssh.Installer{Dialer: &ssh.Dialer{}, Binary: f.agent}
	h := f.host
	h.Identity, h.IdentityFile = "", path
	if _, err := inst.Probe(ctxT(t), h); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Probe with a key file others can read: %v, want a refusal saying chmod 600", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Probe(ctxT(t), h); err != nil {
		t.Errorf("Probe with a private key file: %v", err)
	}
}

func TestFleetMovedHostCleansItsOldPlace(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	en := &enroller{}
	fl, err := ssh.NewFleet(ssh.FleetOptions{Installer: f.inst, Enroller: en, Server: "http://127.0.0.1:7777"})
	if err != nil {
		t.Fatal(err)
	}
	fl.SetPools([]*model.NodePool{pool("lab", f.root, f.srv, "box-1")}, time.Now())
	fl.Reconcile(ctx)
	old := filepath.Join(f.root, "box-1")
	waitFor(t, "the agent in its first folder", func() bool { _, err := os.Stat(old + "/args"); return err == nil })

	// The pool moves its hosts' files elsewhere: in one pass the old
	// folder goes and the new one is installed; the node stays enrolled.
	root2 := filepath.Join(t.TempDir(), "elsewhere")
	fl.SetPools([]*model.NodePool{pool("lab", root2, f.srv, "box-1")}, time.Now())
	fl.Reconcile(ctx)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old folder after the move: %v, want gone", err)
	}
	waitFor(t, "the agent in its new folder", func() bool { _, err := os.Stat(filepath.Join(root2, "box-1", "args")); return err == nil })
	if len(en.retired) != 0 || en.enrolled["lab/box-1"] != 2 {
		t.Errorf("after a move: retired %v, %d tokens; want none retired, a token per install", en.retired, en.enrolled["lab/box-1"])
	}
	h := f.host
	h.InstallDir = root2
	t.Cleanup(func() { _ = f.inst.Uninstall(context.Background(), h) })
}

func TestFleetForgetsAHostItNeverGotInto(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	en := &enroller{}
	state := filepath.Join(t.TempDir(), "ssh-fleet.json")
	fl, err := ssh.NewFleet(ssh.FleetOptions{Installer: f.inst, Enroller: en, Server: "http://127.0.0.1:7777", StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	p := pool("lab", f.root, f.srv, "box-1")
	_, other := sshtest.Keygen(t, filepath.Join(t.TempDir(), "other"))
	p.Spec.SSH.Hosts[0].HostKey = other // a typo'd pin: never logged in
	fl.SetPools([]*model.NodePool{p}, time.Now())
	fl.Reconcile(ctx)
	if s := fl.Status(); len(s) != 1 || s[0].Installed || !strings.Contains(s[0].Error, "host key not trusted") {
		t.Fatalf("status of a host with the wrong pinned key: %+v", s)
	}
	fl.SetPools(nil, time.Now())
	fl.Reconcile(ctx)
	if got := strings.TrimSpace(read(t, state)); got != "[]" {
		t.Errorf("state after the host went: %s, want it forgotten", got)
	}
	if diff := cmp.Diff([]string{"lab/box-1"}, en.retired); diff != "" {
		t.Errorf("unenrolled (-want +got):\n%s", diff)
	}
}
