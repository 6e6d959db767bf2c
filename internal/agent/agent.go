package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent/atomicfile"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/datacache"
)

// Names in the agent's directory.
const (
	lockFile     = "agent.lock"
	nodeIDFile   = "node-id"
	replicasDir  = "replicas"
	ackedFile    = "acked"
	maxReplicaID = 200 // bytes; a replica id is a directory name
)

// Agent runs the replicas the control plane assigns to one node.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	replicas string // Dir/replicas

	// changed is rung (never blocks, holds one ring) when a replica's
	// reported status changes, to cut the long poll short.
	changed chan struct{}
	// tending counts the goroutines that tend replicas; Run waits for them.
	tending sync.WaitGroup
	// launching counts the goroutines that launch replicas of the desired
	// set (see startLaunch); Run waits for them at most launchWait.
	launching  sync.WaitGroup
	launchWait time.Duration
	// releasing bounds the sandbox releases that run at once (maxReleases).
	releasing chan struct{}
	// slots bounds the launches that run at once (maxLaunches).
	slots chan struct{}

	mu      sync.Mutex
	tracked map[string]*replica        // by id; guarded by mu
	samples []agentapi.TelemetrySample // queued for the next sync; guarded by mu
	// notices are the cloud's outstanding notices about this machine, sent
	// on every sync; guarded by mu.
	notices []agentapi.Notice
	busy    map[int]bool // GPU indexes of desired replicas; guarded by mu
	// starting holds the replicas being launched, not yet tracked; guarded
	// by mu.
	starting map[string]*pendingLaunch
	// shut is set once Run no longer waits for launches: one that ends
	// later leaves its replica to the next agent run; guarded by mu.
	shut bool
	// launchBy is the boot-clock time (supervisor.BootTime) after which
	// the node's fence, as last written, is too close for a launch (0: no
	// fence), and fenceMoved is closed (and replaced) when it moves;
	// guarded by mu (fence.go, awaitFence).
	launchBy   time.Duration
	fenceMoved chan struct{}

	// cache is the node's data cache, opened by Run (data.go).
	cache *datacache.Cache
	// fetching is the dataset downloads in progress by replica id, and
	// dataHeld the cache entries each replica pins; guarded by mu.
	fetching map[string]agentapi.DataProgress
	dataHeld map[string][]*datacache.Handle

	// driver is the NVIDIA driver version (empty without one), read once
	// at start for the CUDA check of container images.
	driver string

	// Owned by Run's goroutine.
	nodeID    string
	heartbeat time.Duration
	// lostAfter is the server's heartbeat timeout (0: not told), and
	// fence the node's fence as last written (fence.go).
	lostAfter  time.Duration
	fence      supervisor.Fence
	generation uint64
	delivered  map[string]agentapi.ReplicaStatus // as the server last received them
	// noticesDelivered are the notices the server last received.
	noticesDelivered []agentapi.Notice
	// datasetsDelivered are the dataset digests the server last received.
	datasetsDelivered []string
	draining          bool
}

// New checks cfg and returns an agent; it touches nothing until Run.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuring agent: %w", err)
	}
	cfg = cfg.withDefaults()
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("configuring agent: dir: %w", err)
	}
	cfg.Dir = dir
	if cfg.Isolation.WorkRoot, err = filepath.Abs(cfg.Isolation.WorkRoot); err != nil {
		return nil, fmt.Errorf("configuring agent: isolation.workRoot: %w", err)
	}
	return &Agent{
		cfg:        cfg,
		log:        cfg.Logger,
		replicas:   filepath.Join(dir, replicasDir),
		changed:    make(chan struct{}, 1),
		tracked:    map[string]*replica{},
		starting:   map[string]*pendingLaunch{},
		fetching:   map[string]agentapi.DataProgress{},
		dataHeld:   map[string][]*datacache.Handle{},
		slots:      make(chan struct{}, maxLaunches),
		fenceMoved: make(chan struct{}),
		releasing:  make(chan struct{}, maxReleases),
		launchWait: shutdownLaunchWait,
	}, nil
}

// Run registers the node, re-adopts the replicas found in Dir, and then
// syncs with the control plane until ctx ends, starting and stopping
// replicas as the desired set says. It returns nil when ctx ends, and an
// error only when it cannot use Dir (including when another agent holds
// it). Run may be called once.
//
// Replicas keep running after Run returns: their supervisors are detached.
// A goroutine reaping each supervisor this agent started lives until that
// supervisor exits.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.replicas, 0o700); err != nil {
		return fmt.Errorf("creating agent directory: %w", err)
	}
	// The agent's directory is its own: workloads must not even list it.
	if a.isolated() {
		if err := os.Chmod(a.cfg.Dir, 0o700); err != nil {
			return fmt.Errorf("closing the agent directory to others: %w", err)
		}
	}
	unlock, err := lockDir(a.cfg.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	if !a.cfg.SelfFence {
		if err := a.dropFence(); err != nil {
			return fmt.Errorf("removing the fence of an earlier run: %w", err)
		}
	}
	if a.cfg.Registration.GPUSource != "fake" && len(a.cfg.Registration.GPUs) > 0 {
		a.driver = runtime.DriverVersion(ctx)
	}
	if err := a.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Last, once nothing tends replicas: the gates go with the agent (an
	// agent that starts again opens them for the replicas it adopts).
	defer a.closeGates()
	defer a.tending.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait above: stop tending on any return
	if err := a.openCache(); err != nil {
		return fmt.Errorf("opening the data cache: %w", err)
	}
	if err := a.adoptAll(ctx); err != nil {
		return err
	}
	if a.cfg.Notices != nil {
		a.tending.Go(func() { a.cfg.Notices.Watch(ctx, a.setNotices) })
	}
	if a.cfg.Telemetry != nil {
		a.tending.Go(func() { a.sampleTelemetry(ctx) })
	}
	a.syncLoop(ctx)
	a.awaitLaunches()
	return nil
}

// awaitLaunches waits for the launches in flight when the agent stops, at
// most launchWait: none starts a replica after the stop (startLaunch), so
// this only lets them undo what they prepared. One still running after
// that is left behind; it neither starts nor tracks its replica.
func (a *Agent) awaitLaunches() {
	a.mu.Lock()
	n := len(a.starting)
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { a.launching.Wait(); close(done) }()
	select {
	case <-done:
	case <-a.cfg.Clock.After(a.launchWait):
		a.mu.Lock()
		left := len(a.starting)
		a.mu.Unlock()
		a.log.Warn("shutting down: leaving launches still in flight", "launches", left, "waited", a.launchWait)
	}
	a.mu.Lock()
	a.shut = true
	a.mu.Unlock()
	if n > 0 {
		a.log.Info("shutting down: stopped launching", "launches_in_flight", n)
	}
}

// lockDir takes an exclusive lock on dir, so that two agents never manage
// the same replicas. The lock goes with the process.
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking agent directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking agent directory: another agent is running on %s", dir)
		}
		return nil, fmt.Errorf("locking agent directory: %w", err)
	}
	return func() { f.Close() }, nil
}

// register announces the node, retrying until the server answers, and keeps
// the node id it is given for the next start.
func (a *Agent) register(ctx context.Context) error {
	path := filepath.Join(a.cfg.Dir, nodeIDFile)
	saved, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading node id: %w", err)
	}
	reg := a.cfg.Registration
	reg.Runtimes, reg.NotIsolated, reg.Driver = a.runtimes(), !a.isolated(), a.driver
	if id := strings.TrimSpace(string(saved)); id != "" || reg.NodeID == "" {
		reg.NodeID = id
	}
	retry := a.newBackoff()
	for {
		resp, err := a.cfg.ControlPlane.Register(ctx, reg)
		if err == nil && resp.NodeID == "" {
			err = errors.New("server gave no node id")
		}
		if err == nil {
			if resp.NodeID != reg.NodeID {
				if err := atomicfile.Write(path, []byte(resp.NodeID+"\n"), 0o600); err != nil {
					return fmt.Errorf("saving node id: %w", err)
				}
			}
			a.nodeID, a.heartbeat = resp.NodeID, resp.HeartbeatInterval.D()
			if resp.HeartbeatTimeout > 0 {
				a.lostAfter = resp.HeartbeatTimeout.D()
			}
			a.log = a.log.With("node_id", resp.NodeID)
			a.log.Info("registered node", "name", reg.Name, "gpus", len(reg.GPUs), "reregistered", reg.NodeID == resp.NodeID)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := retry.next()
		a.log.Warn("registering node", "err", err, "retry_in", d)
		if !a.sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// adoptAll tends every replica directory not yet acknowledged.
func (a *Agent) adoptAll(ctx context.Context) error {
	entries, err := os.ReadDir(a.replicas)
	if err != nil {
		return fmt.Errorf("listing replicas: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(a.replicas, e.Name())
		if _, err := os.Stat(filepath.Join(dir, ackedFile)); err == nil {
			continue
		}
		a.log.Info("adopting replica", "replica_id", e.Name())
		a.adopt(ctx, e.Name(), dir)
	}
	return nil
}

func (a *Agent) newBackoff() *backoff {
	return &backoff{min: a.cfg.RetryBackoff, max: a.cfg.MaxRetryBackoff}
}

// sleep waits d on the Clock; false means ctx ended first.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-a.cfg.Clock.After(d):
		return true
	}
}

// ring notes a change without blocking; one pending ring is enough.
func ring(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// setNotices records the cloud's outstanding notices and cuts the long poll
// short, so the server hears of an interruption within a sync.
func (a *Agent) setNotices(ns []agentapi.Notice) {
	a.mu.Lock()
	a.notices = slices.Clone(ns)
	a.mu.Unlock()
	for _, n := range ns {
		a.log.Warn("cloud notice", "kind", n.Kind, "source", n.Source, "instance_id", n.InstanceID, "deadline", n.Deadline, "action", n.Action)
	}
	select {
	case a.changed <- struct{}{}:
	default:
	}
}
