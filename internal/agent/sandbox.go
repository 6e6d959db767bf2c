package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// Folders under Isolation.WorkRoot.
const (
	workReplicas    = "replicas"    // <replica-id>/: HOME of one replica; work/ inside is its tree
	workCheckpoints = "checkpoints" // <job-id>/: a job's checkpoint folder, when the server names none
)

// slirpHost is the address slirp4netns gives the host's loopback inside
// a container started with allow_host_loopback.
const slirpHost = "10.0.2.2"

// containerNetwork is a container's own network namespace, with a way
// out and to the host's loopback (where the server may listen).
const containerNetwork = "slirp4netns:allow_host_loopback=true"

// errNoContainerRuntime refuses a replica with an image on a node that
// has no container runtime: it must never run on the host instead.
var errNoContainerRuntime = errors.New("the job names an image, and this node has no container runtime (podman); it will not run it on the host")

// Runtimes lists the runtimes this agent offers, for its registration.
func (a *Agent) runtimes() []string {
	rs := []string{string(runtime.Process)}
	if a.cfg.Isolation.Podman != nil {
		rs = append(rs, string(runtime.Container))
	}
	return rs
}

// isolated reports whether replicas run apart from the agent's user.
func (a *Agent) isolated() bool { return a.cfg.Isolation.Users != nil }

// prepareSandbox decides how spec runs and lays out its folders: the
// replica's home under the work root (the uploaded archive unpacked into
// its work tree, the server certificate beside it), the job's checkpoint
// folder, all handed to the attempt's user. It holds a reference on that
// user, which forget gives back.
func (a *Agent) prepareSandbox(ctx context.Context, spec agentapi.ReplicaSpec) (runtime.Sandbox, error) {
	iso := a.cfg.Isolation
	sb := runtime.Sandbox{Runtime: runtime.Process, LogLimit: iso.LogLimit}
	if spec.Image != "" {
		if iso.Podman == nil {
			return sb, errNoContainerRuntime
		}
		sb.Runtime = runtime.Container
	}
	sb.Home = filepath.Join(iso.WorkRoot, workReplicas, spec.ID)
	sb.Work = filepath.Join(sb.Home, "work")
	if err := mkdirPassable(filepath.Dir(sb.Home)); err != nil {
		return sb, fmt.Errorf("creating the work root: %w", err)
	}
	// A home left by an earlier run of this replica id is not reused.
	if err := os.RemoveAll(sb.Home); err != nil {
		return sb, fmt.Errorf("clearing the replica's folder: %w", err)
	}
	if err := os.MkdirAll(sb.Work, 0o700); err != nil {
		return sb, fmt.Errorf("creating the replica's folder: %w", err)
	}
	if spec.Archive != "" {
		if err := a.unpack(ctx, sb.Work, spec.Archive); err != nil {
			return sb, &unpackError{digest: spec.Archive, err: err}
		}
	}
	rel := spec.Workdir
	switch {
	case sb.Runtime == runtime.Container && path.IsAbs(rel):
		sb.Workdir = rel // a folder of the image: no host path reaches a container
	case sb.Runtime == runtime.Container:
		sb.Workdir = path.Join(runtime.MountWork, rel)
	case filepath.IsAbs(rel):
		sb.Workdir = rel // a host folder; only admins may ask for one
	default:
		sb.Workdir = filepath.Join(sb.Work, rel)
		if err := os.MkdirAll(sb.Workdir, 0o700); err != nil {
			return sb, fmt.Errorf("creating workdir: %w", err)
		}
	}
	if len(a.cfg.ServerCA) > 0 && strings.HasPrefix(spec.Env["GPUFLEET_SERVER"], "https://") {
		if err := os.WriteFile(filepath.Join(sb.Home, ServerCAFile), a.cfg.ServerCA, 0o644); err != nil { // a certificate: public
			return sb, fmt.Errorf("writing %s: %w", ServerCAFile, err)
		}
	}
	switch dir := spec.Env["GPUFLEET_CHECKPOINT_DIR"]; {
	case spec.Checkpoint != nil:
		// Synced with object storage: a folder of the attempt's own,
		// filled by the restore, so that what it starts from is the
		// uploaded checkpoint, never a leftover of an earlier attempt.
		sb.CheckpointDir = filepath.Join(iso.WorkRoot, workCheckpoints, spec.AttemptID)
		sb.CheckpointSynced = true
		if err := os.RemoveAll(sb.CheckpointDir); err != nil {
			return sb, fmt.Errorf("clearing the attempt's checkpoint folder: %w", err)
		}
	case filepath.IsAbs(dir):
		sb.CheckpointDir = dir
	default:
		sb.CheckpointDir = filepath.Join(iso.WorkRoot, workCheckpoints, spec.JobID)
	}
	if err := mkdirPassable(filepath.Dir(sb.CheckpointDir)); err != nil {
		return sb, fmt.Errorf("creating the checkpoint root: %w", err)
	}
	if err := os.MkdirAll(sb.CheckpointDir, 0o700); err != nil {
		return sb, fmt.Errorf("creating the job's checkpoint folder: %w", err)
	}
	if iso.Users != nil {
		u, err := iso.Users.Acquire(spec.AttemptID)
		if err != nil {
			return sb, err
		}
		sb.User = &u
		for _, dir := range []string{sb.Home, sb.CheckpointDir} {
			if err := runtime.Own(dir, u); err != nil {
				a.putUser(spec.AttemptID, sb)
				return sb, err
			}
		}
	}
	sb.Gate = a.gateSpec(spec)
	if sb.Runtime == runtime.Container {
		sb.Container = a.containerSpec(spec)
		if sb.Gate != nil {
			// A namespace of its own even where jobs share the host's:
			// the port is the gate's, and the replica is not published.
			sb.Container.Network = containerNetwork
		}
	}
	return sb, nil
}

// mkdirPassable makes dir, a folder above workload folders, with mode
// 0711: others may pass through it, but not list it.
func mkdirPassable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return os.Chmod(dir, 0o711)
}

// containerSpec is the container part of spec's sandbox.
func (a *Agent) containerSpec(spec agentapi.ReplicaSpec) *runtime.ContainerSpec {
	iso := a.cfg.Isolation
	nofile, nproc := runtime.HardLimits()
	c := &runtime.ContainerSpec{
		Podman:             iso.Podman.Path,
		OCIRuntime:         iso.Podman.OCIRuntime,
		Name:               runtime.ContainerName(spec.ID),
		Image:              spec.Image,
		Network:            containerNetwork,
		CPU:                spec.CPU,
		Memory:             int64(spec.Memory),
		ReadOnly:           !iso.WritableRoot,
		NoFile:             nofile,
		NProc:              nproc,
		PullTimeoutSeconds: int(iso.PullTimeout.Seconds()),
	}
	if iso.HostNetwork {
		c.Network = "host"
	} else if spec.Rank == 0 && spec.Env["WORLD_SIZE"] != "" && spec.Env["WORLD_SIZE"] != "1" {
		// The other ranks reach rank 0 at MASTER_ADDR:MASTER_PORT on the host.
		if p := spec.Env["MASTER_PORT"]; p != "" {
			c.Publish = []string{p + ":" + p}
		}
	}
	var uuids []string
	for _, i := range spec.GPUs {
		for _, g := range a.cfg.Registration.GPUs {
			if g.Index == i {
				uuids = append(uuids, g.UUID)
			}
		}
	}
	if a.cfg.Registration.GPUSource != "fake" {
		c.Devices = runtime.GPUDevices(spec.GPUs, uuids, "", nil)
		c.Driver = a.driver
	}
	return c
}

// EnvOverrides are the variables a replica sees differently from what the
// server sent: its own folders, and for a container the paths and
// addresses as they are inside it. They hold no secret.
func (a *Agent) envOverrides(spec agentapi.ReplicaSpec, sb runtime.Sandbox) map[string]string {
	env := map[string]string{"GPUFLEET_CHECKPOINT_DIR": sb.CheckpointDir, "HOME": sb.Home}
	if len(spec.Data) > 0 {
		env["GPUFLEET_DATA_DIR"] = dataRoot(sb)
	}
	if len(a.cfg.ServerCA) > 0 && strings.HasPrefix(spec.Env["GPUFLEET_SERVER"], "https://") {
		env["GPUFLEET_CA"] = filepath.Join(sb.Home, ServerCAFile)
	}
	if sb.Runtime != runtime.Container {
		return env
	}
	env["GPUFLEET_CHECKPOINT_DIR"] = runtime.MountCheckpoint
	env["HOME"] = runtime.MountRoot
	if _, ok := env["GPUFLEET_CA"]; ok {
		env["GPUFLEET_CA"] = path.Join(runtime.MountRoot, ServerCAFile)
	}
	// Inside the container its GPUs are numbered from 0; the host's
	// indexes stay readable.
	if len(spec.GPUs) > 0 {
		local := make([]string, len(spec.GPUs))
		host := make([]string, len(spec.GPUs))
		for i, g := range spec.GPUs {
			local[i], host[i] = strconv.Itoa(i), strconv.Itoa(g)
		}
		env["CUDA_VISIBLE_DEVICES"] = strings.Join(local, ",")
		env["GPUFLEET_HOST_GPUS"] = strings.Join(host, ",")
	}
	if sb.Container.Network != "host" {
		for _, k := range []string{"GPUFLEET_SERVER", "MASTER_ADDR"} {
			if v, ok := spec.Env[k]; ok {
				env[k] = viaSlirp(v)
			}
		}
	}
	return env
}

// viaSlirp rewrites a loopback host in v (a URL or a bare host) to the
// address at which a slirp4netns container reaches the host's loopback.
func viaSlirp(v string) string {
	if u, err := url.Parse(v); err == nil && u.Host != "" {
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			host, port = u.Host, ""
		}
		if isLoopback(host) {
			u.Host = slirpHost
			if port != "" {
				u.Host = net.JoinHostPort(slirpHost, port)
			}
			return u.String()
		}
		return v
	}
	if isLoopback(v) {
		return slirpHost
	}
	return v
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// holdSandbox takes on the user of an adopted replica's sandbox.
func (a *Agent) holdSandbox(attempt string, sb runtime.Sandbox) error {
	if sb.User == nil || a.cfg.Isolation.Users == nil {
		return nil
	}
	return a.cfg.Isolation.Users.Hold(attempt, *sb.User)
}

// putUser gives back the replica's reference on its attempt's user; the
// last one reclaims the user (its processes killed, its checkpoint folder
// taken back) before another attempt may get it.
func (a *Agent) putUser(attempt string, sb runtime.Sandbox) {
	users := a.cfg.Isolation.Users
	if sb.User == nil || users == nil || !users.Put(attempt) {
		return
	}
	if err := runtime.Reclaim(*sb.User, sb.CheckpointDir); err != nil {
		// Keep the user out of circulation: better one id fewer than a
		// tenant's files readable by the next.
		a.log.Error("reclaiming a workload user; not handing it out again", "uid", sb.User.UID, "err", err)
		return
	}
	users.Release(attempt)
}

// release undoes a finished replica's sandbox once the server has its end:
// the container (if any) removed, its home deleted, its user given back.
func (a *Agent) release(ctx context.Context, r *replica) {
	a.closeGate(r)
	if r.dir == "" {
		return
	}
	sb, ok, err := supervisor.ReadSandbox(r.dir)
	if err != nil {
		a.log.Warn("reading replica sandbox", "replica_id", r.id, "err", err)
	}
	if !ok {
		return
	}
	if rt, err := runtime.For(sb); err == nil {
		if err := rt.Cleanup(ctx, sb); err != nil {
			a.log.Warn("cleaning up after replica", "replica_id", r.id, "err", err)
		}
	}
	if err := os.RemoveAll(sb.Home); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn("removing replica folder", "replica_id", r.id, "err", err)
	}
	if sb.CheckpointSynced {
		// Its last checkpoint was uploaded before its end was reported.
		if err := os.RemoveAll(sb.CheckpointDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("removing the attempt's checkpoint folder", "replica_id", r.id, "err", err)
		}
	}
	a.releaseData(r.id)
	a.putUser(r.attempt, sb)
}

// unpackError is a failure to unpack the job's uploaded workdir.
type unpackError struct {
	digest string
	err    error
}

func (e *unpackError) Error() string {
	return fmt.Sprintf("agent could not unpack the job's workdir %s: %v", e.digest, e.err)
}
func (e *unpackError) Unwrap() error { return e.err }
