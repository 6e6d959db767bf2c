package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/gpufleet/gpufleet/internal/controller"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/provider"
	"github.com/gpufleet/gpufleet/internal/provider/sim"
)

// SimConfig is what `up --sim` takes.
type SimConfig struct {
	Enabled   bool
	Scenario  string
	TimeScale float64
	Clouds    []string
}

// defaultSimPool is the pool `up --sim` scales while the fleet declares
// none: any simulated cloud, spot or on-demand, 0 to 8 nodes, an empty node
// kept 5 minutes. Applying a fleet with a NodePool replaces it.
func defaultSimPool(clouds []string) *model.NodePool {
	return &model.NodePool{Name: "sim", Spec: model.NodePoolSpec{
		Provider: model.ProviderSim, Sim: &model.SimPoolSettings{Clouds: clouds},
		CapacityTypes: []model.CapacityType{model.Spot, model.OnDemand},
		Min:           0, Max: 8, IdleTimeout: model.Duration(5 * time.Minute),
	}}
}

// newSimProvider builds the simulated clouds from the embedded catalog on
// the wall clock.
func newSimProvider(c SimConfig, cat *catalog.Catalog) (*sim.Provider, error) {
	var scn *sim.Scenario
	if c.Scenario != "" {
		data, err := os.ReadFile(c.Scenario)
		if err != nil {
			return nil, fmt.Errorf("reading --sim-scenario: %w", err)
		}
		if scn, err = sim.ParseScenario(data); err != nil {
			return nil, fmt.Errorf("--sim-scenario %s: %w", c.Scenario, err)
		}
	}
	return sim.New(sim.Config{Catalog: cat, Providers: c.Clouds, Scenario: scn, TimeScale: c.TimeScale, Seed: time.Now().UnixNano()})
}

// simNodes runs live mode: an in-process agent for each simulated instance
// that runs, with fake GPUs, so jobs really run as processes here.
type simNodes struct {
	ctx     context.Context // the server's: agents outlive a scale cycle
	dataDir string
	cp      agentapi.ControlPlane
	cat     *catalog.Catalog
	exe     string
	iso     agent.Isolation
	log     *slog.Logger
	version string // the binary's, which agents report

	mu     sync.Mutex
	agents map[string]*simAgent
	wg     sync.WaitGroup
}

type simAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newSimNodes(ctx context.Context, dataDir string, cp agentapi.ControlPlane, cat *catalog.Catalog, iso agent.Isolation, log *slog.Logger, version string) (*simNodes, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the gpufleet binary for supervisors: %w", err)
	}
	return &simNodes{ctx: ctx, dataDir: dataDir, cp: cp, cat: cat, exe: exe, iso: iso, log: log, version: version, agents: map[string]*simAgent{}}, nil
}

func (s *simNodes) dir(nodeID string) string { return filepath.Join(s.dataDir, "sim", nodeID) }

// agentConfig is the agent of node n: registering as n (provider sim, the
// offer's GPUs as fake GPUs, its region, zone, capacity type and labels),
// with simulated telemetry on those GPUs (busy while a replica holds
// them), as `up --fake-gpus` has, so `jobs top` and the dashboard show
// readings labelled simulated. The returned source, when not nil, needs
// its Busy wired to the agent.
func (s *simNodes) agentConfig(n *model.Node) (agent.Config, *telemetry.Simulated, error) {
	count, name := controller.LaunchedGPUs(n)
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
	src, simTel := TelemetrySource(s.ctx, inv, s.log)
	return agent.Config{
		Telemetry:    src,
		Dir:          s.dir(n.ID),
		ControlPlane: s.cp,
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
func (s *simNodes) Start(_ context.Context, n *model.Node) error {
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
	count, name := controller.LaunchedGPUs(n)
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
func (s *simNodes) Stop(n *model.Node) {
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
func (s *simNodes) Wait() { s.wg.Wait() }

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

// simScale wires the sim provider into the controller config.
func simScale(sp *sim.Provider, nodes *simNodes, clouds []string) (func(ctx context.Context) []model.Offer, controller.ScaleConfig) {
	offers := func(ctx context.Context) []model.Offer { o, _ := sp.Offers(ctx); return o }
	return offers, controller.ScaleConfig{
		Providers:    []provider.Provider{sp},
		StartNode:    nodes.Start,
		StopNode:     nodes.Stop,
		DefaultPools: []*model.NodePool{defaultSimPool(clouds)},
	}
}
