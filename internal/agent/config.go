package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Config configures an Agent. Zero optional fields take the defaults noted.
type Config struct {
	// Dir is the agent's state directory, e.g. <data-dir>/agent. Required.
	Dir string
	// ControlPlane is the server. Required.
	ControlPlane agentapi.ControlPlane
	// Registration is the node's facts. The agent keeps the id the server
	// gave it in Dir; Registration.NodeID is asked for only when Dir has
	// none yet (a node the autoscaler created and named).
	Registration agentapi.Registration
	// SupervisorCommand is the argv that starts a supervisor; the replica
	// directory is appended. Typically {os.Executable(), "supervise", "--dir"}.
	// Required.
	SupervisorCommand []string
	// Clock drives polling, backoff and timeouts. Default clock.Real.
	Clock clock.Clock
	// Logger receives the agent's log. Default: discard.
	Logger *slog.Logger

	// SyncWait is how long a sync may wait on the server for a change (long
	// poll), capped by the server's heartbeat interval. Default 10s.
	SyncWait time.Duration
	// LogChunkSize is the most bytes of output sent in one AppendLog.
	// Default 256 KiB.
	LogChunkSize int
	// PollInterval is how often a replica's records and processes are
	// checked and its new output shipped. Default 1s.
	PollInterval time.Duration
	// StartTimeout is how long a supervisor may take to record its pid
	// before its replica counts as lost. Default 30s.
	StartTimeout time.Duration
	// RetryBackoff is the first wait after a failed call to the server; it
	// doubles up to MaxRetryBackoff. Defaults 1s and 30s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// Telemetry, when set, is sampled every TelemetryInterval (default
	// 5s) and its samples ride on the next sync. The agent owns it from
	// Run on; telemetry.None reports "no GPU" and nothing else.
	Telemetry         telemetry.Source
	TelemetryInterval time.Duration

	// ServerCA is the certificate (PEM) the agent pins for an https
	// server, or nil. Replicas whose GPUFLEET_SERVER is https get it as
	// ServerCAFile in their own folder, named by GPUFLEET_CA, so the
	// CLI and SDK inside a job pin it too.
	ServerCA []byte

	// Isolation keeps replicas from the node's control-plane files and
	// from each other. Its zero value runs them as the agent's own user.
	Isolation Isolation

	// Notices, when set, watches the machine's cloud for warnings that it
	// will take the machine back (spot interruption); the agent carries
	// the outstanding ones on every sync from then on. The agent runs it
	// from Run on.
	Notices NoticeSource

	// Data configures the node's dataset cache (data.go).
	Data DataConfig

	// SelfFence stops the node's replicas when the server has not answered
	// a sync for most of its heartbeat timeout, before the server can give
	// the node up and run them elsewhere (fence.go). For agents that reach
	// the server over a network; an agent in the server's own process
	// leaves it off (it cannot be cut off from its server).
	SelfFence bool
}

// NoticeSource watches for the cloud's notices about this machine (for
// EC2, package provider/aws/imds).
type NoticeSource interface {
	// Watch runs until ctx ends, calling report with the complete set of
	// outstanding notices each time it changes.
	Watch(ctx context.Context, report func([]agentapi.Notice))
}

// Isolation says how the agent isolates replicas (package runtime).
type Isolation struct {
	// WorkRoot holds the replicas' own folders (HOME and working tree)
	// and, by default, the jobs' checkpoint folders. It must lie outside
	// Dir, in a folder the workload users can traverse. Default: Dir/work
	// (only sound without Users, where nothing is isolated anyway).
	WorkRoot string
	// Users, when set, runs every attempt as its own unprivileged user;
	// the agent must be root. nil runs replicas as the agent's user, and
	// the node registers as not isolated: the server then places only
	// admins' jobs on it.
	Users *runtime.Users
	// Podman, when set, is the container engine for replicas with an
	// image; without it such replicas are refused (the server does not
	// place them here).
	Podman *runtime.Podman
	// HostNetwork lets containers use the host's network; otherwise each
	// has its own (slirp4netns, reaching the host's loopback only as
	// 10.0.2.2, where a loopback server is).
	HostNetwork bool
	// WritableRoot leaves a container's image root writable; by default
	// it is read-only with tmpfs /tmp, /run and /var/tmp.
	WritableRoot bool
	// PullTimeout bounds pulling a missing image. Default 10m.
	PullTimeout time.Duration
	// LogLimit caps each replica's output log in bytes; past it the last
	// part is kept and the cut noted. Default 1 GiB.
	LogLimit int64
}

// Validate reports every problem with c at once, each with its field path.
func (c Config) Validate() error {
	var errs model.FieldErrors
	if c.Dir == "" {
		errs.Add("dir", "is required")
	}
	if c.ControlPlane == nil {
		errs.Add("controlPlane", "is required")
	}
	switch {
	case len(c.SupervisorCommand) == 0:
		errs.Add("supervisorCommand", "is required")
	case c.SupervisorCommand[0] == "":
		errs.Add("supervisorCommand[0]", "must name a program")
	}
	for path, d := range map[string]time.Duration{
		"syncWait":          c.SyncWait,
		"pollInterval":      c.PollInterval,
		"startTimeout":      c.StartTimeout,
		"retryBackoff":      c.RetryBackoff,
		"maxRetryBackoff":   c.MaxRetryBackoff,
		"telemetryInterval": c.TelemetryInterval,
	} {
		if d < 0 {
			errs.Add(path, "must not be negative")
		}
	}
	if c.Isolation.Users != nil && os.Geteuid() != 0 {
		errs.Add("isolation.users", "needs an agent running as root: run it as root, or without workload users (then only admins' jobs run here)")
	}
	if w := c.Isolation.WorkRoot; w != "" && c.Dir != "" {
		if rel, err := filepath.Rel(c.Dir, w); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && c.Isolation.Users != nil {
			errs.Add("isolation.workRoot", fmt.Sprintf("%s is inside the agent's directory %s, which workloads must not reach: choose a folder outside it", w, c.Dir))
		}
	}
	if c.Data.CacheBytes < 0 {
		errs.Add("data.cacheBytes", "must not be negative")
	}
	if c.LogChunkSize < 0 {
		errs.Add("logChunkSize", "must not be negative")
	}
	if c.RetryBackoff > 0 && c.MaxRetryBackoff > 0 && c.MaxRetryBackoff < c.RetryBackoff {
		errs.Add("maxRetryBackoff", "must not be less than retryBackoff")
	}
	return errs.Err()
}

// withDefaults fills in zero optional fields.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.SyncWait == 0 {
		c.SyncWait = 10 * time.Second
	}
	if c.LogChunkSize == 0 {
		c.LogChunkSize = 256 << 10
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.Isolation.WorkRoot == "" {
		c.Isolation.WorkRoot = filepath.Join(c.Dir, "work")
	}
	if c.Isolation.PullTimeout == 0 {
		c.Isolation.PullTimeout = runtime.DefaultPullTimeout
	}
	if c.TelemetryInterval == 0 {
		c.TelemetryInterval = telemetry.DefaultInterval
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = time.Second
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = max(30*time.Second, c.RetryBackoff)
	}
	return c
}
