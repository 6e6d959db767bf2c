package ssh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Installer probes hosts and installs, checks and removes the agent on
// them. It is safe for concurrent use, one call per host at a time.
type Installer struct {
	Dialer *Dialer
	// Binary is the gpufleet executable copied to hosts; empty means the
	// running one (os.Executable). It must be built for the hosts' OS and
	// architecture (Install checks).
	Binary string
	// NvidiaSMI is the program the probe runs on hosts (default
	// nvidia-smi, found on the login PATH).
	NvidiaSMI string

	hashMu sync.Mutex
	hashes map[string]string // by "path size mtime": sha256 of the binary
}

// Facts are what a probe found on a host.
type Facts struct {
	Hostname string `json:"hostname"`
	// Arch is the Go name of the host's architecture (amd64, arm64).
	Arch   string      `json:"arch"`
	GPUs   []model.GPU `json:"gpus,omitempty"`
	CPU    float64     `json:"cpu"`
	Memory model.Bytes `json:"memory"`
	// Systemd says the host runs systemd, so the agent is a unit.
	Systemd bool `json:"systemd"`
}

// Agent is how the installed agent reaches the server.
type Agent struct {
	// Server is the URL the agent connects to, as the host reaches it.
	Server string
	// CA, when set, is the PEM the agent pins for an https Server.
	CA []byte
	// Token returns a fresh agent token for the node. It is called only
	// when the host needs a new install, so a host that is already right
	// keeps its token.
	Token func(ctx context.Context) (string, error)
	// Args are more `gpufleet agent` flags (registration of pool and
	// price, isolation).
	Args []string
}

// manifest is what an install wrote, last, in <dir>/install.json: equal
// manifests and a running agent mean nothing to do.
type manifest struct {
	Binary string   `json:"binarySha256"`
	Server string   `json:"server"`
	CA     string   `json:"caSha256,omitempty"`
	Args   []string `json:"args"`
	Mode   string   `json:"mode"` // systemd or process
}

// conn is one logged-in host; sudo is set for a user other than root.
type conn struct {
	c    *ssh.Client
	h    Host
	sudo bool
}

func (k *conn) run(ctx context.Context, what, script string, in io.Reader) ([]byte, error) {
	if k.sudo {
		script = "exec sudo -n sh -c " + quote(script)
	}
	out, err := run(ctx, k.c, what, script, in)
	if err != nil {
		return out, fmt.Errorf("%s: %w", k.h, err)
	}
	return out, nil
}

// notLoggedIn marks an error that happened before gpufleet could run
// anything on the host (unreachable, untrusted key, refused login).
type notLoggedIn struct{ err error }

func (e notLoggedIn) Error() string { return e.err.Error() }
func (e notLoggedIn) Unwrap() error { return e.err }

// NotLoggedIn reports whether err says gpufleet never logged in to the
// host, so it cannot have changed anything there.
func NotLoggedIn(err error) bool {
	var e notLoggedIn
	return errors.As(err, &e)
}

func (in *Installer) connect(ctx context.Context, h Host) (*conn, error) {
	c, err := in.Dialer.Dial(ctx, h)
	if err != nil {
		return nil, notLoggedIn{err}
	}
	k := &conn{c: c, h: h}
	out, err := k.run(ctx, "checking the user", "id -u", nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if strings.TrimSpace(string(out)) != "0" {
		k.sudo = true
		if _, err := k.run(ctx, "checking passwordless sudo (a user other than root needs it)", "true", nil); err != nil {
			c.Close()
			return nil, err
		}
	}
	return k, nil
}

// Probe logs in to h and reports what it has.
func (in *Installer) Probe(ctx context.Context, h Host) (Facts, error) {
	k, err := in.connect(ctx, h)
	if err != nil {
		return Facts{}, err
	}
	defer k.c.Close()
	return in.probe(ctx, k)
}

// probeScript prints one section per fact; nvidia-smi failing or missing
// means no GPUs, which the section's status line says.
const probeScript = `
echo "hostname $(hostname)"
echo "uname $(uname -s) $(uname -m)"
echo "cpus $(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)"
echo "memkb $(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then echo "systemd yes"; else echo "systemd no"; fi
smi=%s
if command -v "$smi" >/dev/null 2>&1; then
  if out=$("$smi" --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits 2>&1); then
    echo "gpus ok"; printf '%%s\n' "$out" | sed 's/^/gpu /'
  else
    echo "gpus none"; printf '%%s\n' "$out" | head -n 3 | sed 's/^/gpuerr /'
  fi
else
  echo "gpus none"
fi
`

func (in *Installer) probe(ctx context.Context, k *conn) (Facts, error) {
	smi := in.NvidiaSMI
	if smi == "" {
		smi = "nvidia-smi"
	}
	out, err := k.run(ctx, "probing", fmt.Sprintf(probeScript, quote(smi)), nil)
	if err != nil {
		return Facts{}, err
	}
	f, err := parseProbe(out)
	if err != nil {
		return Facts{}, fmt.Errorf("%s: probing: %w", k.h, err)
	}
	return f, nil
}

// parseProbe reads probeScript's output.
func parseProbe(out []byte) (Facts, error) {
	var f Facts
	var smi bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), " ")
		switch key {
		case "hostname":
			f.Hostname = val
		case "uname":
			osName, machine, _ := strings.Cut(val, " ")
			if osName != "Linux" {
				return f, fmt.Errorf("the host runs %s; the agent runs on Linux", osName)
			}
			f.Arch = goArch(machine)
		case "cpus":
			n, err := strconv.Atoi(val)
			if err != nil {
				return f, fmt.Errorf("cpu count %q does not parse", val)
			}
			f.CPU = float64(n)
		case "memkb":
			kb, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return f, fmt.Errorf("MemTotal %q does not parse", val)
			}
			f.Memory = model.Bytes(kb) * model.KiB
		case "systemd":
			f.Systemd = val == "yes"
		case "gpu":
			smi.WriteString(val + "\n")
		}
	}
	if smi.Len() > 0 {
		gpus, err := gpu.ParseQuery(smi.Bytes())
		if err != nil {
			return f, fmt.Errorf("reading nvidia-smi: %w", err)
		}
		f.GPUs = gpus
	}
	return f, nil
}

func goArch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	}
	return machine
}

// Install makes h run the agent as a: the binary copied when it differs,
// the token written to a 0600 file, the agent started as a systemd unit
// or a supervised background process. A host whose manifest matches and
// whose agent runs is left alone (its token kept). It returns the host's
// facts.
func (in *Installer) Install(ctx context.Context, h Host, a Agent) (Facts, error) {
	k, err := in.connect(ctx, h)
	if err != nil {
		return Facts{}, err
	}
	defer k.c.Close()
	f, err := in.probe(ctx, k)
	if err != nil {
		return Facts{}, err
	}
	bin, err := in.binary()
	if err != nil {
		return f, err
	}
	if f.Arch != runtime.GOARCH {
		return f, fmt.Errorf("%s is %s; this gpufleet binary is linux/%s (run a server built for the hosts, or set its binary)", h, f.Arch, runtime.GOARCH)
	}
	sum, err := in.sha256(bin)
	if err != nil {
		return f, err
	}
	want := manifest{Binary: sum, Server: a.Server, Args: agentArgs(h, a), Mode: "process"}
	if f.Systemd {
		want.Mode = "systemd"
	}
	if len(a.CA) > 0 {
		s := sha256.Sum256(a.CA)
		want.CA = hex.EncodeToString(s[:])
	}
	wantJSON, _ := json.Marshal(want)
	d := h.Dir()
	state, err := k.run(ctx, "reading the install state", fmt.Sprintf(`cat %s/install.json 2>/dev/null; echo; %s`, d, runningCheck(h, want.Mode)), nil)
	if err != nil {
		return f, err
	}
	have, status, _ := strings.Cut(string(state), "\n")
	if have == string(wantJSON) && strings.TrimSpace(status) == "running" {
		return f, nil
	}
	if err := in.upload(ctx, k, bin, sum); err != nil {
		return f, err
	}
	if a.Token == nil {
		return f, fmt.Errorf("installing on %s: no token source", h)
	}
	tok, err := a.Token(ctx)
	if err != nil {
		return f, fmt.Errorf("minting the agent token of node %s: %w", h.Name, err)
	}
	env := fmt.Sprintf("GPUFLEET_SERVER=%s\nGPUFLEET_TOKEN=%s\n", a.Server, tok)
	if len(a.CA) > 0 {
		if _, err := k.run(ctx, "writing the server CA", fmt.Sprintf(`umask 022; cat > %[1]s/ca.pem.tmp && mv -f %[1]s/ca.pem.tmp %[1]s/ca.pem`, d), bytes.NewReader(a.CA)); err != nil {
			return f, err
		}
		env += fmt.Sprintf("GPUFLEET_CA=%s/ca.pem\n", d)
	}
	if _, err := k.run(ctx, "writing the agent's token", fmt.Sprintf(`umask 077; cat > %[1]s/agent.env.tmp && mv -f %[1]s/agent.env.tmp %[1]s/agent.env`, d), strings.NewReader(env)); err != nil {
		return f, err
	}
	start := startProcess(h, want.Args)
	if f.Systemd {
		start = startUnit(h, want.Args)
	}
	if _, err := k.run(ctx, "starting the agent", start, nil); err != nil {
		return f, err
	}
	if _, err := k.run(ctx, "recording the install", fmt.Sprintf(`cat > %[1]s/install.json.tmp && mv -f %[1]s/install.json.tmp %[1]s/install.json`, d), bytes.NewReader(wantJSON)); err != nil {
		return f, err
	}
	return f, nil
}

// upload copies the binary to <dir>/bin/gpufleet unless the host has it.
func (in *Installer) upload(ctx context.Context, k *conn, bin, sum string) error {
	d := k.h.Dir()
	out, err := k.run(ctx, "checking the binary", fmt.Sprintf(`mkdir -p %[1]s/bin %[1]s/data %[1]s/work && chmod 0755 %[1]s %[1]s/work && chmod 0700 %[1]s/data && { sha256sum %[1]s/bin/gpufleet 2>/dev/null || true; }`, d), nil)
	if err != nil {
		return err
	}
	if have, _, _ := strings.Cut(string(out), " "); have == sum {
		return nil
	}
	f, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("reading the gpufleet binary: %w", err)
	}
	defer f.Close()
	script := fmt.Sprintf(`cat > %[1]s/bin/.gpufleet.tmp && chmod 0755 %[1]s/bin/.gpufleet.tmp && [ "$(sha256sum < %[1]s/bin/.gpufleet.tmp | cut -d' ' -f1)" = %[2]s ] && mv -f %[1]s/bin/.gpufleet.tmp %[1]s/bin/gpufleet`, d, sum)
	_, err = k.run(ctx, "copying the gpufleet binary", script, f)
	return err
}

// agentArgs are the agent's flags after `gpufleet agent`.
func agentArgs(h Host, a Agent) []string {
	d := h.Dir()
	args := []string{"--data-dir", d + "/data", "--work-root", d + "/work", "--name", h.Name, "--region", h.Region}
	if h.Zone != "" {
		args = append(args, "--zone", h.Zone)
	}
	return append(args, a.Args...)
}

func cmdline(h Host, args []string) string {
	parts := []string{h.Dir() + "/bin/gpufleet", "agent"}
	for _, a := range args {
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

// runningCheck prints "running" when the agent runs.
func runningCheck(h Host, mode string) string {
	if mode == "systemd" {
		return fmt.Sprintf(`systemctl is-active --quiet %s && echo running || echo stopped`, h.Unit())
	}
	return fmt.Sprintf(`pid=$(cat %s/agent.pid 2>/dev/null) && kill -0 "$pid" 2>/dev/null && echo running || echo stopped`, h.Dir())
}

// startUnit writes the node's unit and (re)starts it. KillMode=process
// keeps replicas' supervisors running across agent restarts, as the agent
// re-adopts them; Uninstall ends them.
func startUnit(h Host, args []string) string {
	unit := fmt.Sprintf(`[Unit]
Description=gpufleet agent, node %[1]s of pool %[2]s (installed over ssh; removed with the pool)
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=%[3]s/agent.env
WorkingDirectory=%[3]s
ExecStart=%[4]s
Restart=always
RestartSec=5
KillMode=process

[Install]
WantedBy=multi-user.target
`, h.Name, h.Pool, h.Dir(), cmdline(h, args))
	return fmt.Sprintf(`cat > /etc/systemd/system/%[1]s <<'GPUFLEET_UNIT'
%[2]sGPUFLEET_UNIT
systemctl daemon-reload && systemctl enable %[1]s >/dev/null 2>&1 && systemctl restart %[1]s`, h.Unit(), unit)
}

// startProcess writes run.sh, a supervisor loop that restarts the agent,
// and starts it in its own session, stopping an earlier one first. The
// loop records its pid (its session and process group) in agent.pid.
func startProcess(h Host, args []string) string {
	d := h.Dir()
	runSh := fmt.Sprintf(`#!/bin/sh
# gpufleet agent supervisor for node %[1]s of pool %[2]s (installed over ssh).
echo $$ > %[3]s/agent.pid.tmp && mv -f %[3]s/agent.pid.tmp %[3]s/agent.pid
set -a; . %[3]s/agent.env; set +a
cd %[3]s || exit 1
while :; do
  %[4]s
  echo "gpufleet agent exited with status $?; restarting in 5s"
  sleep 5
done
`, h.Name, h.Pool, d, cmdline(h, args))
	return fmt.Sprintf(`%[2]s
cat > %[1]s/run.sh <<'GPUFLEET_RUN'
%[3]sGPUFLEET_RUN
chmod 0755 %[1]s/run.sh
rm -f %[1]s/agent.pid
nohup setsid %[1]s/run.sh >> %[1]s/agent.log 2>&1 < /dev/null &
i=0; while [ ! -s %[1]s/agent.pid ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -s %[1]s/agent.pid ] || { echo "the agent's supervisor did not start; see %[1]s/agent.log" >&2; exit 1; }`, d, stopProcess(d), runSh)
}

// stopProcess ends a running supervisor loop and its agent (its process
// group), waiting up to 10s before killing.
func stopProcess(d string) string {
	return fmt.Sprintf(`if pid=$(cat %[1]s/agent.pid 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL -- "-$pid" 2>/dev/null || true
fi`, d)
}

// uninstallScript stops the agent (unit or loop), then ends whatever still
// runs from the node's folder (replicas' supervisors, by executable) or in
// it (replicas, by working directory), and deletes the folder and unit.
func uninstallScript(h Host) string {
	d := h.Dir()
	return fmt.Sprintf(`set -u
unit=/etc/systemd/system/%[2]s
if [ -f "$unit" ]; then
  systemctl disable --now %[2]s >/dev/null 2>&1 || true
  rm -f "$unit"
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
%[3]s
# One ls lists every process's executable and working directory; a deleted
# binary reads "PATH (deleted)".
under() {
  ls -l /proc/[0-9]*/exe /proc/[0-9]*/cwd 2>/dev/null | awk -v d=%[1]s/ -v self=$$ '{
    line = $0; sub(/ \(deleted\)$/, "", line)
    i = index(line, " -> "); if (i == 0) next
    n = split(substr(line, 1, i - 1), f, " "); split(f[n], p, "/")
    if (index(substr(line, i + 4) "/", d) == 1 && p[3] != self) print p[3]
  }' | sort -u
}
n=0
found=$(under)
while [ -n "$found" ] && [ $n -lt 20 ]; do
  kill -KILL $found 2>/dev/null || true
  n=$((n+1)); sleep 0.2
  found=$(under)
done
[ -z "$found" ] || { echo "processes of %[1]s survive SIGKILL" >&2; exit 1; }
rm -rf %[1]s
rmdir %[4]s 2>/dev/null || true`, d, h.Unit(), stopProcess(d), h.InstallDir)
}

// Uninstall stops h's agent and removes everything gpufleet put there. A
// host without an install is success.
func (in *Installer) Uninstall(ctx context.Context, h Host) error {
	k, err := in.connect(ctx, h)
	if err != nil {
		return err
	}
	defer k.c.Close()
	_, err = k.run(ctx, "removing the agent", uninstallScript(h), nil)
	return err
}

// Status reports whether h's agent runs and whether anything of the node
// is left on the host (its folder or unit).
func (in *Installer) Status(ctx context.Context, h Host) (running, present bool, err error) {
	k, err := in.connect(ctx, h)
	if err != nil {
		return false, false, err
	}
	defer k.c.Close()
	out, err := k.run(ctx, "checking the agent", fmt.Sprintf(`if [ -f /etc/systemd/system/%[1]s ]; then %[2]s; else %[3]s; fi
if [ -e %[4]s ] || [ -e /etc/systemd/system/%[1]s ]; then echo present; else echo absent; fi`,
		h.Unit(), runningCheck(h, "systemd"), runningCheck(h, "process"), h.Dir()), nil)
	if err != nil {
		return false, false, err
	}
	f := strings.Fields(string(out))
	return len(f) == 2 && f[0] == "running", len(f) == 2 && f[1] == "present", nil
}

func (in *Installer) binary() (string, error) {
	if in.Binary != "" {
		return in.Binary, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the gpufleet binary to copy: %w", err)
	}
	return exe, nil
}

// sha256 hashes the binary once per (path, size, mtime).
func (in *Installer) sha256(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("reading the gpufleet binary: %w", err)
	}
	key := fmt.Sprintf("%s %d %d", path, st.Size(), st.ModTime().UnixNano())
	in.hashMu.Lock()
	defer in.hashMu.Unlock()
	if s, ok := in.hashes[key]; ok {
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the gpufleet binary: %w", err)
	}
	defer f.Close()
	hs := sha256.New()
	if _, err := io.Copy(hs, f); err != nil {
		return "", fmt.Errorf("reading the gpufleet binary: %w", err)
	}
	if in.hashes == nil {
		in.hashes = map[string]string{}
	}
	in.hashes[key] = hex.EncodeToString(hs.Sum(nil))
	return in.hashes[key], nil
}
