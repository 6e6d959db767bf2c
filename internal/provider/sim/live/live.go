// Package live runs the machines of the simulated clouds in live mode
// (`gpufleet up --sim`): when a simulated instance runs, an in-process
// agent registers its node with fake GPUs, so jobs really run here as
// processes; when the instance is gone, its agent stops and what it ran is
// killed. The server wires it into the scale loop (StartNode, StopNode).
package live

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/agent/gpu"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/catalog"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Config is what Nodes needs.
type Config struct {
	// DataDir holds each node's agent directory under sim/<node id>.
	DataDir string
	// CP is the control plane the agents speak to; it may be set on Nodes
	// (Nodes.CP) after New, before the first Start.
	CP      agentapi.ControlPlane
	Catalog *catalog.Catalog
	// Isolation is how the agents isolate jobs (shared with the local
	// node).
	Isolation agent.Isolation
	Log       *slog.Logger
	// Version is the binary's, which agents report.
	Version string
	// GPUs says how many GPUs of which model a launched node's offer has
	// (controller.LaunchedGPUs).
	GPUs func(n *model.Node) (count int, gpuModel string)
}

// Nodes runs live mode: an in-process agent for each simulated instance
// that runs, with fake GPUs, so jobs really run as processes here. Its
// mutex guards the running agents.
type Nodes struct {
	ctx     context.Context // the server's: agents outlive a scale cycle
	dataDir string
	// CP is the control plane the agents speak to; set before Start.
	CP      agentapi.ControlPlane
	cat     *catalog.Catalog
	exe     string
	iso     agent.Isolation
	log     *slog.Logger
	version string
	gpus    func(n *model.Node) (int, string)

	mu     sync.Mutex
	agents map[string]*simAgent
	wg     sync.WaitGroup
}

type simAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns the live nodes of the simulated clouds; ctx is the server's,
// which the agents run under (they outlive a scale cycle).
func New(ctx context.Context, cfg Config) (*Nodes, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the gpufleet binary for supervisors: %w", err)
	}
	if cfg.GPUs == nil {
		return nil, fmt.Errorf("live sim nodes: Config.GPUs is required")
	}
	return &Nodes{ctx: ctx, dataDir: cfg.DataDir, CP: cfg.CP, cat: cfg.Catalog, exe: exe, iso: cfg.Isolation, log: cfg.Log,
		version: cfg.Version, gpus: cfg.GPUs, agents: map[string]*simAgent{}}, nil
}

func (s *Nodes) dir(nodeID string) string { return filepath.Join(s.dataDir, "sim", nodeID) }

// agentConfig is the agent of node n: registering as n (provider sim, the
// offer's GPUs as fake GPUs, its region, zone, capacity type and labels),
// with simulated telemetry on those GPUs (busy while a replica holds
// them), as `up --fake-gpus` has, so `jobs top` and the dashboard show
// readings labelled simulated. The returned source, when not nil, needs
// its Busy wired to the agent.
func (s *Nodes) agentConfig(n *model.Node) (agent.Config, *telemetry.Simulated, error) {
	count, name := s.gpus(n)
	var gpus []model.GPU
	if count > 0 {
		var err error
		gpus, err = gpu.ParseFake(fmt.Sprintf("%dx%s", count, name), func(name string) (model.Bytes, bool) {
			a, ok := s.cat.Accelerator(name)
			return a.Memory, ok && a.Memory > 0
		})
		if err != nil {
			return agent.Config{}, nil, fmt.Errorf("declaring the GPUs of node %s: %w", n.ID, err)
		}
		for i := range gpus {
			gpus[i].UUID = fmt.Sprintf("GPU-%s-%d", n.ID, i)
		}
	}
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	inv := gpu.Inventory{GPUs: gpus, Source: gpu.SourceFake}
	src, simTel := telemetrySource(gpus)
	return agent.Config{
		Telemetry:    src,
		Dir:          s.dir(n.ID),
		ControlPlane: s.CP,
		Registration: agentapi.Registration{
			NodeID: n.ID, Name: n.Name, Provider: n.Provider, GPUs: gpus, GPUSource: inv.Source,
			CPU: n.CPU, Memory: n.Memory, Labels: labels, Region: n.Region, Zone: n.Zone,
			InstanceType: n.InstanceType, CapacityType: n.CapacityType, AgentVersion: s.version,
		},
		SupervisorCommand: []string{s.exe, "supervise", "--dir"},
		Isolation:         s.iso,
		Clock:             clock.Real{},
		Logger:            s.log.With("component", "agent"),
		PollInterval:      200 * time.Millisecond,
	}, simTel, nil
}

// Start brings node n up with the agent of agentConfig.
func (s *Nodes) Start(_ context.Context, n *model.Node) error {
	cfg, simTel, err := s.agentConfig(n)
	if err != nil {
		return err
	}
	ag, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if simTel != nil {
		simTel.Busy = ag.BusyGPU
	}
	count, name := s.gpus(n)
	ctx, cancel := context.WithCancel(s.ctx)
	sa := &simAgent{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if _, dup := s.agents[n.ID]; dup {
		s.mu.Unlock()
		cancel()
		return nil
	}
	s.agents[n.ID] = sa
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(sa.done)
		if err := ag.Run(ctx); err != nil {
			s.log.Warn("simulated node's agent stopped", "node_id", n.ID, "err", err)
		}
	}()
	s.log.Info("simulated node started", "node_id", n.ID, "instance_type", n.InstanceType, "gpus", count, "gpu", name)
	return nil
}

// Stop ends node n's agent once its instance is gone. Its replicas had
// their stop signal through the drain path when there was a notice; what
// still runs dies with the simulated machine.
func (s *Nodes) Stop(n *model.Node) {
	s.mu.Lock()
	sa := s.agents[n.ID]
	delete(s.agents, n.ID)
	s.mu.Unlock()
	if sa != nil {
		sa.cancel()
		<-sa.done
	}
	// Also after a restart: the new simulation no longer has the instance
	// and the old processes must not outlive it.
	killReplicas(filepath.Join(s.dir(n.ID), "replicas"), s.log)
	s.log.Info("simulated node stopped", "node_id", n.ID)
}

// Wait returns once every agent has returned (after the server's context
// ended).
func (s *Nodes) Wait() { s.wg.Wait() }

// killReplicas kills what is left of each replica under dir: its child's
// process group and its supervisor.
func killReplicas(dir string, log *slog.Logger) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pids, ok, err := supervisor.ReadPIDs(filepath.Join(dir, e.Name()))
		if err != nil || !ok {
			continue
		}
		if c := pids.Child; c != nil && supervisor.Alive(c.PID, c.Start) {
			_ = syscall.Kill(-c.PID, syscall.SIGKILL)
			log.Info("simulated machine gone: killed replica", "replica", e.Name(), "pid", c.PID)
		}
		if sp := pids.Supervisor; sp.PID > 0 && supervisor.Alive(sp.PID, sp.Start) {
			_ = syscall.Kill(sp.PID, syscall.SIGKILL)
		}
	}
}

// telemetrySource is simulated telemetry on a node's fake GPUs (none
// without GPUs); the caller wires its Busy to the agent.
func telemetrySource(gpus []model.GPU) (telemetry.Source, *telemetry.Simulated) {
	if len(gpus) == 0 {
		return telemetry.None{}, nil
	}
	sim := &telemetry.Simulated{}
	for _, g := range gpus {
		sim.GPUs = append(sim.GPUs, telemetry.SimGPU{Index: g.Index, UUID: g.UUID, MemoryMiB: float64(g.Memory / model.MiB)})
	}
	return sim, sim
}

// StopAll ends every simulated machine's workloads at shutdown: the
// simulated clouds live in this process, so their instances — and what
// runs on them — end with it. Each replica's process group gets SIGTERM,
// then SIGKILL (with its supervisor) if it is still alive when ctx ends or
// after its grace; it returns how many were signalled and how many had to
// be killed.
func (s *Nodes) StopAll(ctx context.Context, grace time.Duration) (signalled, killed int) {
	type replica struct {
		dir   string
		child supervisor.Process
	}
	var live []replica
	nodes, _ := os.ReadDir(filepath.Join(s.dataDir, "sim"))
	for _, n := range nodes {
		reps, _ := os.ReadDir(filepath.Join(s.dataDir, "sim", n.Name(), "replicas"))
		for _, r := range reps {
			dir := filepath.Join(s.dataDir, "sim", n.Name(), "replicas", r.Name())
			pids, ok, err := supervisor.ReadPIDs(dir)
			if err != nil || !ok || pids.Child == nil || !supervisor.Alive(pids.Child.PID, pids.Child.Start) {
				continue
			}
			_ = syscall.Kill(-pids.Child.PID, syscall.SIGTERM)
			live = append(live, replica{dir: dir, child: *pids.Child})
		}
	}
	signalled = len(live)
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(live) > 0 {
		live = slices.DeleteFunc(live, func(r replica) bool { return !supervisor.Alive(r.child.PID, r.child.Start) })
		if len(live) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for _, r := range live {
				_ = syscall.Kill(-r.child.PID, syscall.SIGKILL)
			}
			killed = len(live)
			live = nil
		case <-tick.C:
		}
	}
	// Supervisors that outlive their child (or a killed one) go too.
	for _, n := range nodes {
		killReplicas(filepath.Join(s.dataDir, "sim", n.Name(), "replicas"), s.log)
	}
	return signalled, killed
}
