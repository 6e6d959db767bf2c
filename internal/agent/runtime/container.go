package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/cuda"
)

// containerRuntime runs the workload in a podman container. The child is
// `podman run` in the foreground; the container outlives a killed client
// (conmon is its parent), which is why Signal and Cleanup address the
// container by name rather than the child's group.
type containerRuntime struct{}

// DefaultPullTimeout bounds pulling an image that is not on the node.
const DefaultPullTimeout = 10 * time.Minute

// Prepare makes sure the image is on the node, pulling it within the pull
// timeout, so that an unreachable registry is an attempt error, not a hang.
func (containerRuntime) Prepare(ctx context.Context, sb Sandbox) error {
	c := sb.Container
	if err := exec.CommandContext(ctx, c.Podman, "image", "exists", c.Image).Run(); err != nil {
		if err := pull(ctx, c); err != nil {
			return err
		}
	}
	if c.Driver == "" {
		return nil
	}
	img, err := Inspect(ctx, Podman{Path: c.Podman}, c.Image)
	if err != nil {
		return err
	}
	if v := cuda.Check(img.CUDA, c.Driver); !v.OK {
		return fmt.Errorf("image %s cannot run on this node: %s", c.Image, v.Reason)
	}
	return nil
}

// pull fetches a missing image within the pull timeout.
func pull(ctx context.Context, c *ContainerSpec) error {
	timeout := DefaultPullTimeout
	if c.PullTimeoutSeconds > 0 {
		timeout = time.Duration(c.PullTimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Podman, "pull", "--quiet", c.Image)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pulling image %s: no answer within %v", c.Image, timeout)
		}
		return fmt.Errorf("pulling image %s: %s", c.Image, lastLine(stderr.String(), err))
	}
	return nil
}

// Command is `podman run` of the sandbox. The environment reaches podman
// through its own environment and `--env KEY` (no value), so secrets never
// stand on a command line that `ps` shows.
func (containerRuntime) Command(sb Sandbox, argv []string, out *os.File) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("reading spec: no command")
	}
	args := RunArgs(sb, argv)
	env := []string{"PATH=" + os.Getenv("PATH")}
	if env[0] == "PATH=" {
		env[0] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env = append(env, Environ(sb.Env)...)
	return &exec.Cmd{
		Path:        sb.Container.Podman,
		Args:        append([]string{sb.Container.Podman}, args...),
		Env:         env,
		Stdout:      out,
		Stderr:      out,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}, nil
}

// RunArgs is the argument list of `podman run` for sb and the command
// argv (without the program name "podman").
func RunArgs(sb Sandbox, argv []string) []string {
	c := sb.Container
	args := []string{}
	if c.OCIRuntime != "" {
		args = append(args, "--runtime", c.OCIRuntime)
	}
	args = append(args, "run", "--rm", "--name", c.Name,
		"--pull=never",
		// catatonit as PID 1 forwards the checkpoint signal to the command,
		// which as PID 1 itself would ignore SIGTERM.
		"--init",
		// Signals are delivered by name (podman kill), not proxied: a proxy
		// cannot deliver SIGKILL.
		"--sig-proxy=false",
		"--cap-drop=all",
		"--security-opt", "no-new-privileges",
		"--network", c.Network,
		"--ulimit", fmt.Sprintf("nofile=%d:%d", c.NoFile, c.NoFile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", c.NProc, c.NProc),
		"--label", "gpufleet.dev/replica="+strings.TrimPrefix(c.Name, "gpufleet-"),
		"--volume", sb.Home+":"+MountRoot+":rw",
		"--workdir", sb.Workdir,
	)
	if sb.CheckpointDir != "" {
		args = append(args, "--volume", sb.CheckpointDir+":"+MountCheckpoint+":rw")
	}
	for _, d := range sb.Data {
		args = append(args, "--volume", d.Host+":"+d.Target+":ro")
	}
	if u := sb.User; u != nil {
		args = append(args, "--user", strconv.Itoa(u.UID)+":"+strconv.Itoa(u.GID))
	}
	if c.ReadOnly {
		args = append(args, "--read-only", "--read-only-tmpfs=true")
	}
	if c.CPU > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(c.CPU, 'f', -1, 64))
	}
	if c.Memory > 0 {
		args = append(args, "--memory", strconv.FormatInt(c.Memory, 10)+"b")
	}
	for _, d := range c.Devices {
		args = append(args, "--device", d)
	}
	for _, p := range c.Publish {
		args = append(args, "--publish", p)
	}
	for _, k := range slices.Sorted(maps.Keys(sb.Env)) {
		args = append(args, "--env", k)
	}
	args = append(args, c.Image)
	return append(args, argv...)
}

// Signal sends sig to the container's init, which forwards it to the
// command; SIGKILL ends the container at once.
func (containerRuntime) Signal(sb Sandbox, _ int, sig syscall.Signal) error {
	c := sb.Container
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Podman, "kill", "--signal", strconv.Itoa(int(sig)), c.Name)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "no such container") || strings.Contains(stderr.String(), "not running") {
			return nil // it has ended, or never started
		}
		return fmt.Errorf("signalling container %s: %s", c.Name, lastLine(stderr.String(), err))
	}
	return nil
}

// Cleanup removes the container, running or not.
func (containerRuntime) Cleanup(ctx context.Context, sb Sandbox) error {
	c := sb.Container
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Podman, "rm", "--force", "--ignore", "--time", "0", c.Name)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("removing container %s: %s", c.Name, lastLine(stderr.String(), err))
	}
	return nil
}

// lastLine is the last non-empty line of a tool's stderr, or err's text.
func lastLine(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return err.Error()
}
