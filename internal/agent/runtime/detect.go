package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Podman is a container engine found on the node.
type Podman struct {
	// Path is the podman program; Version what it reports.
	Path    string
	Version string
	// OCIRuntime is the OCI runtime podman is told to use: runc where it
	// is installed (podman's default, crun, fails on hosts with hybrid
	// cgroups and tight rlimits), else podman's default.
	OCIRuntime string
}

// DetectPodman looks for a rootful podman: podman on PATH (or at path, when
// given) that answers, and an agent running as root. ok is false, with the
// reason, where none can be used.
func DetectPodman(ctx context.Context, path string) (p Podman, ok bool, why string) {
	if os.Geteuid() != 0 {
		return Podman{}, false, "the agent is not root (rootful podman needs root)"
	}
	if path == "" {
		var err error
		if path, err = exec.LookPath("podman"); err != nil {
			return Podman{}, false, "podman is not installed"
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version", "--format", "{{.Client.Version}}").Output()
	if err != nil {
		return Podman{}, false, fmt.Sprintf("%s version: %v", path, err)
	}
	p = Podman{Path: path, Version: strings.TrimSpace(string(out))}
	if runc, err := exec.LookPath("runc"); err == nil {
		p.OCIRuntime = runc
	}
	return p, true, ""
}

// HardLimits returns the rlimits containers get: the host's hard limits on
// open files and processes (which a rootful container's must not exceed),
// processes capped at 32768 (some kernels, gVisor among them, refuse to
// raise RLIMIT_NPROC further inside a container even below the hard limit).
func HardLimits() (nofile, nproc uint64) {
	const rlimitNproc = 6 // RLIMIT_NPROC on Linux
	nofile, nproc = 1024, 4096
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Max > 0 {
		nofile = min(l.Max, 1<<20)
	}
	if syscall.Getrlimit(rlimitNproc, &l) == nil && l.Max > 0 {
		nproc = min(l.Max, 32768)
	}
	return nofile, nproc
}

// GPUDevices lists what a container needs to use host GPUs with the given
// indexes and UUIDs: CDI names (nvidia.com/gpu=UUID) where the NVIDIA
// container toolkit has written a CDI spec, else the device nodes
// /dev/nvidiaN of those GPUs and the shared control nodes that exist.
// devRoot and cdiDirs are for tests; empty means the host's.
func GPUDevices(indexes []int, uuids []string, devRoot string, cdiDirs []string) []string {
	if len(indexes) == 0 {
		return nil
	}
	if devRoot == "" {
		devRoot = "/dev"
	}
	if cdiDirs == nil {
		cdiDirs = []string{"/etc/cdi", "/var/run/cdi"}
	}
	if hasNvidiaCDI(cdiDirs) && len(uuids) == len(indexes) {
		out := make([]string, 0, len(uuids))
		for _, u := range uuids {
			out = append(out, "nvidia.com/gpu="+u)
		}
		return out
	}
	var out []string
	for _, i := range indexes {
		if p := filepath.Join(devRoot, fmt.Sprintf("nvidia%d", i)); exists(p) {
			out = append(out, p)
		}
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		if p := filepath.Join(devRoot, n); exists(p) {
			out = append(out, p)
		}
	}
	return out
}

func hasNvidiaCDI(dirs []string) bool {
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "nvidia") && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".json")) {
				return true
			}
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// DriverVersion asks nvidia-smi for the node's driver version; empty
// without an NVIDIA driver.
func DriverVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}
