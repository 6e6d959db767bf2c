package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/model"
)

// IsolationOptions are an operator's choices of isolation; the commands
// map their flags onto them and NewIsolation turns them into Isolation.
type IsolationOptions struct {
	// WorkRoot, when set, is Isolation.WorkRoot; else DefaultWorkRoot.
	WorkRoot string
	// Containers is "auto" (podman where it answers; the default), "podman"
	// (required: fail without it) or "none".
	Containers string
	// PodmanPath overrides podman's lookup on PATH.
	PodmanPath string
	// HostNetwork and WritableRoot are Isolation's.
	HostNetwork, WritableRoot bool
	// LogLimit is Isolation.LogLimit.
	LogLimit model.Bytes
	// InsecureRunAsAgentUser runs replicas as the agent's own user even
	// when it is root: every job can then read the node's control plane.
	InsecureRunAsAgentUser bool
	// FirstUID and UIDCount bound the workload users; 0: the defaults.
	FirstUID, UIDCount int
	// ClaimDir is where uids in use are claimed machine-wide; default
	// runtime.DefaultClaimDir.
	ClaimDir string
}

// DefaultWorkRoot is where replicas' folders live for an agent whose state
// is in dir: for root, a folder of /var/lib/gpufleet named after dir (the
// data dir, often under /root, is closed to workload users); otherwise
// dir/work, since nothing is isolated anyway.
func DefaultWorkRoot(dir string) string {
	if os.Geteuid() != 0 {
		return filepath.Join(dir, "work")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join("/var/lib/gpufleet/work", hex.EncodeToString(sum[:6]))
}

// NewIsolation checks o against this machine and returns the isolation to
// run with, and notes for the operator: what is isolated and how, and,
// loudly, what is not.
func NewIsolation(ctx context.Context, dir string, o IsolationOptions) (Isolation, []string, error) {
	iso := Isolation{WorkRoot: o.WorkRoot, HostNetwork: o.HostNetwork, WritableRoot: o.WritableRoot, LogLimit: int64(o.LogLimit)}
	if iso.WorkRoot == "" {
		iso.WorkRoot = DefaultWorkRoot(dir)
	}
	abs, err := filepath.Abs(iso.WorkRoot)
	if err != nil {
		return iso, nil, fmt.Errorf("--work-root: %w", err)
	}
	iso.WorkRoot = abs
	var notes []string
	root := os.Geteuid() == 0
	switch {
	case root && !o.InsecureRunAsAgentUser:
		first, count := o.FirstUID, o.UIDCount
		if first == 0 {
			first = runtime.DefaultFirstUID
		}
		if count == 0 {
			count = runtime.DefaultUIDCount
		}
		if err := os.MkdirAll(iso.WorkRoot, 0o711); err != nil {
			return iso, nil, fmt.Errorf("--work-root: creating %s: %w", iso.WorkRoot, err)
		}
		if err := os.Chmod(iso.WorkRoot, 0o711); err != nil {
			return iso, nil, fmt.Errorf("--work-root: %w", err)
		}
		claims := o.ClaimDir
		if claims == "" {
			claims = runtime.DefaultClaimDir
		}
		if iso.Users, err = runtime.NewUsers(first, count, claims, iso.WorkRoot, folderOwners(filepath.Join(iso.WorkRoot, workReplicas))); err != nil {
			return iso, nil, err
		}
		if err := reachable(iso.WorkRoot); err != nil {
			return iso, nil, fmt.Errorf("--work-root: %w", err)
		}
		notes = append(notes, fmt.Sprintf("jobs run as unprivileged users (uid %d and up, one per attempt) in %s, outside the data dir", first, iso.WorkRoot))
	case root:
		notes = append(notes, "INSECURE: --insecure-run-as-server-user: jobs run as root, the server's own user, and can read its data dir (tokens, keys, the database); only admins' jobs will be placed here")
	default:
		notes = append(notes, fmt.Sprintf("NOT ISOLATED: the agent runs as uid %d, not root, so it cannot run jobs as other users; only admins' jobs will be placed here (run as root, or with podman, to isolate tenants)", os.Geteuid()))
	}
	switch o.Containers {
	case "", "auto", "podman":
		p, ok, why := runtime.DetectPodman(ctx, o.PodmanPath)
		switch {
		case ok && iso.Users != nil:
			iso.Podman = &p
			notes = append(notes, fmt.Sprintf("jobs with an image run in podman %s containers (OCI runtime %s)", p.Version, orDefault(p.OCIRuntime, "podman's default")))
		case ok:
			why = "containers run only with workload users (root, without --insecure-run-as-server-user)"
			fallthrough
		default:
			if o.Containers == "podman" {
				return iso, nil, fmt.Errorf("--container-runtime podman: %s", why)
			}
			notes = append(notes, "no container runtime ("+why+"): jobs with an image will not be placed here")
		}
	case "none":
		notes = append(notes, "container runtime off (--container-runtime none): jobs with an image will not be placed here")
	default:
		return iso, nil, fmt.Errorf("--container-runtime %q: want auto, podman or none", o.Containers)
	}
	return iso, notes, nil
}

// folderOwners returns the uids, other than the agent's own, that own a
// folder in dir: in the replicas' folder of the work root, the workload
// users of the replicas not yet released (a release deletes the folder
// before it gives the user back).
func folderOwners(dir string) map[int]bool {
	entries, _ := os.ReadDir(dir) // none yet: no user in use
	owners := map[int]bool{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
			owners[int(st.Uid)] = true
		}
	}
	return owners
}

// reachable checks that every folder above dir lets others pass (x), so
// workload users can reach their folders under it.
func reachable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is under %s (mode %04o), which workload users cannot pass through: choose a folder they can reach (e.g. under /var/lib or /srv), or make %s mode 0711", dir, d, fi.Mode().Perm(), d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
