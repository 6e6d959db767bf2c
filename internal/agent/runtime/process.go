package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// processRuntime runs the workload as a process group on the host.
type processRuntime struct{}

func (processRuntime) Prepare(context.Context, Sandbox) error { return nil }

// Command resolves the program in the workload's PATH (relative entries
// against its workdir, as a shell there would) and runs it as sb.User.
func (processRuntime) Command(sb Sandbox, argv []string, out *os.File) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("reading spec: no command")
	}
	path, err := LookPath(argv[0], sb.Env["PATH"], sb.Workdir)
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u := sb.User; u != nil {
		// No supplementary groups: the workload holds nothing of the
		// agent's, not even its groups.
		attr.Credential = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}
	}
	return &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         Environ(sb.Env),
		Dir:         sb.Workdir,
		Stdout:      out,
		Stderr:      out,
		SysProcAttr: attr,
	}, nil
}

func (processRuntime) Signal(_ Sandbox, pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling process group %d: %w", pgid, err)
	}
	return nil
}

// Cleanup has nothing of its own to remove: the supervisor kills the
// child's group, and Release kills whatever else the user left running.
func (processRuntime) Cleanup(context.Context, Sandbox) error { return nil }

// Environ formats env as KEY=value lines, sorted.
func Environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// LookPath resolves the program as a shell in workdir with the child's PATH
// would, to an absolute path: a name with a slash is taken relative to
// workdir; another is searched for in pathList, where relative entries
// (including the empty one) are relative to workdir.
func LookPath(file, pathList, workdir string) (string, error) {
	if strings.Contains(file, "/") {
		if !filepath.IsAbs(file) {
			file = filepath.Join(workdir, file)
		}
		return file, nil // starting it reports a missing or unrunnable file
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			d = filepath.Join(workdir, d)
		}
		p := filepath.Join(d, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("looking up %q: %w", file, exec.ErrNotFound)
}
