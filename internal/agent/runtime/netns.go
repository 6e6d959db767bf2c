package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// GateSpec marks a service replica whose port the agent fronts: the
// workload listens on Port inside a network namespace of its own, which
// nothing on the host or in another tenant's namespace can reach, and the
// agent serves Port on the host, letting through only requests that carry
// the service key (docs/services.md, "Isolation").
type GateSpec struct {
	Port int `json:"port"`
}

// Start starts cmd as sb says: a gated process replica in a network
// namespace of its own (StartInPrivateNetwork), anything else as it is.
func Start(sb Sandbox, cmd *exec.Cmd) error {
	if sb.Gate != nil && sb.Runtime == Process {
		return StartInPrivateNetwork(cmd)
	}
	return cmd.Start()
}

// StartInPrivateNetwork starts cmd in a new network namespace that holds
// only its loopback interface, up: the workload can listen there and
// reach itself, and nothing else (no route out, and no other process's
// port is in reach). It needs CAP_SYS_ADMIN (the agent runs as root
// wherever replicas run as workload users).
func StartInPrivateNetwork(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		// The thread is never unlocked once its namespace changed: Go
		// ends it with this goroutine rather than reuse it elsewhere.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("creating a network namespace: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			errc <- err
			return
		}
		// The fork happens on this thread, so the child is born in
		// the new namespace.
		errc <- cmd.Start()
	}()
	return <-errc
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	return nil
}

// DialIn connects to addr from inside the network namespace of process
// pid. The connection, once made, belongs to that namespace whatever
// thread later uses it.
func DialIn(ctx context.Context, pid int, addr string) (net.Conn, error) {
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("opening the replica's network namespace: %w", err)
	}
	defer ns.Close()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering the replica's network namespace: %w", err)}
			return
		}
		// Left locked: the thread dies with the goroutine (see above).
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// ContainerPID is the host pid of the main process of podman container
// name, whose network namespace is the container's.
func ContainerPID(ctx context.Context, podman, name string) (int, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, podman, "inspect", "--type", "container", "--format", "{{.State.Pid}}", name)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("inspecting container %s: %s", name, lastLine(stderr.String(), err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s is not running", name)
	}
	return pid, nil
}

// ErrNotRunning is returned for a replica whose process is not (or no
// longer) there to dial into.
var ErrNotRunning = errors.New("the replica is not running")
