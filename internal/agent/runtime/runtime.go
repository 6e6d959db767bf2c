package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Kind names a runtime.
type Kind string

// The runtimes.
const (
	Process   Kind = "process"
	Container Kind = "container"
)

// User is the unprivileged identity a workload runs as.
type User struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Sandbox is how one replica runs, decided by the agent before launch and
// kept in the replica's directory (SandboxFile) for the supervisor and for
// a restarted agent.
type Sandbox struct {
	Runtime Kind `json:"runtime"`
	// User runs the workload; nil runs it as the supervisor's own user (an
	// agent that is not root, or the explicit insecure opt-in).
	User *User `json:"user,omitempty"`
	// Home is the replica's own host folder (HOME of a process; mounted at
	// MountRoot in a container). Work, inside it, is the working tree.
	Home string `json:"home"`
	Work string `json:"work"`
	// Workdir is where the command starts: a host folder for a process, a
	// path inside the container for a container.
	Workdir string `json:"workdir"`
	// CheckpointDir is the job's checkpoint folder on the host, or empty.
	CheckpointDir string `json:"checkpointDir,omitempty"`
	// CheckpointSynced marks CheckpointDir as the attempt's own copy of
	// checkpoints kept in object storage: the agent removes it when it
	// releases the replica, after its last upload.
	CheckpointSynced bool `json:"checkpointSynced,omitempty"`
	// EnvOverrides replace variables of the server's environment for this
	// replica: its own folders, and paths and addresses as a container
	// sees them. They hold no secret (the spec's values stay in spec.json).
	EnvOverrides map[string]string `json:"envOverrides,omitempty"`
	// Env is the workload's whole environment, set by the supervisor from
	// the spec and EnvOverrides just before Command; never recorded.
	Env map[string]string `json:"-"`

	// LogLimit caps the replica's output log in bytes (the last part is
	// kept past it); 0 is the supervisor's default, 1 GiB.
	LogLimit int64 `json:"logLimit,omitempty"`

	// Gate, for a service replica on a node that isolates tenants: the
	// workload gets a network namespace of its own (a process one with
	// loopback only; a container its slirp4netns one, never the host's)
	// and the agent serves the port on the host (GateSpec).
	Gate *GateSpec `json:"gate,omitempty"`

	// Container, for Runtime == Container.
	Container *ContainerSpec `json:"container,omitempty"`

	// Data are the job's datasets: entries of the node's data cache,
	// read-only (docs/datasets.md).
	Data []DataMount `json:"data,omitempty"`
}

// DataMount is one dataset shown to a workload.
type DataMount struct {
	// Entry names the data cache entry (pinned again by an agent that
	// adopts the replica after a restart).
	Entry string `json:"entry"`
	// Host is the entry's folder on the host.
	Host string `json:"host"`
	// Target is where the job finds it: for a process, a symbolic link the
	// agent made there; for a container, the mount point inside it, bound
	// read-only.
	Target string `json:"target"`
}

// ContainerSpec is the part of a Sandbox only a container runtime uses.
type ContainerSpec struct {
	// Podman is the podman program; OCIRuntime the OCI runtime it uses.
	Podman     string `json:"podman"`
	OCIRuntime string `json:"ociRuntime,omitempty"`
	// Name is the container's name (ContainerName of the replica id).
	Name  string `json:"name"`
	Image string `json:"image"`
	// Devices are host device nodes (/dev/nvidia0) or CDI names
	// (nvidia.com/gpu=UUID) handed to the container.
	Devices []string `json:"devices,omitempty"`
	// Network is podman's --network value: "slirp4netns:allow_host_loopback=true",
	// "none", "host" (only where the agent allows it) or "bridge".
	Network string `json:"network"`
	// Publish lists host:container ports to publish ("29500:29500").
	Publish []string `json:"publish,omitempty"`
	// CPU (cores) and Memory (bytes) limit the container; 0: unlimited.
	CPU    float64 `json:"cpu,omitempty"`
	Memory int64   `json:"memory,omitempty"`
	// ReadOnly mounts the image's root read-only (with tmpfs /tmp, /run).
	ReadOnly bool `json:"readOnly"`
	// NoFile and NProc are the container's rlimits, at or below the host's
	// hard limits (rootful podman would set them above otherwise).
	NoFile uint64 `json:"nofile"`
	NProc  uint64 `json:"nproc"`
	// PullTimeout bounds pulling a missing image.
	PullTimeoutSeconds int `json:"pullTimeoutSeconds,omitempty"`
	// Driver is the node's NVIDIA driver version, against which the
	// image's CUDA version is checked before it runs; empty: no check
	// (no real GPUs).
	Driver string `json:"driver,omitempty"`
}

// SandboxFile is the Sandbox's record in a replica directory.
const SandboxFile = "sandbox.json"

// Paths of a replica's folders inside its container.
const (
	MountRoot       = "/gpufleet"
	MountWork       = MountRoot + "/work"
	MountCheckpoint = MountRoot + "/checkpoint"
)

// ContainerName is the name of the container that runs replica id.
func ContainerName(replicaID string) string { return "gpufleet-" + replicaID }

// Runtime carries out a Sandbox. Implementations hold no state: every
// method can be called by another process than the one that started the
// workload (the agent cleans up after a supervisor that died).
type Runtime interface {
	// Prepare does what must happen before the child starts and may take
	// long (pulling an image), within ctx. An error is the replica's exit:
	// it never ran.
	Prepare(ctx context.Context, sb Sandbox) error
	// Command returns the child process that runs the workload, writing
	// to out. The supervisor starts it in a process group of its own.
	Command(sb Sandbox, argv []string, out *os.File) (*exec.Cmd, error)
	// Signal delivers sig to the workload whose child leads group pgid.
	Signal(sb Sandbox, pgid int, sig syscall.Signal) error
	// Cleanup ends and removes whatever of the workload outlives its
	// child. Idempotent; safe when nothing is left.
	Cleanup(ctx context.Context, sb Sandbox) error
}

// For returns the runtime of sb.
func For(sb Sandbox) (Runtime, error) {
	switch sb.Runtime {
	case Process, "":
		return processRuntime{}, nil
	case Container:
		if sb.Container == nil {
			return nil, fmt.Errorf("sandbox: runtime %s without container settings", sb.Runtime)
		}
		return containerRuntime{}, nil
	default:
		return nil, fmt.Errorf("sandbox: unknown runtime %q", sb.Runtime)
	}
}
