package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/gpufleet/gpufleet/internal/agent/gate"
	"github.com/gpufleet/gpufleet/internal/agent/runtime"
	"github.com/gpufleet/gpufleet/internal/agent/supervisor"
	"github.com/gpufleet/gpufleet/internal/agentapi"
	"github.com/gpufleet/gpufleet/internal/model"
)

// gateSpec is the gate of spec's sandbox: a service replica (tagged with
// its service, PORT set) on an agent that isolates tenants is reachable
// only through the agent's gate. An agent that does not isolate runs only
// admins' jobs, and its replicas listen on the host as they are.
func (a *Agent) gateSpec(spec agentapi.ReplicaSpec) *runtime.GateSpec {
	if !a.isolated() || spec.Tags[model.TagService] == "" {
		return nil
	}
	port, err := strconv.Atoi(spec.Env["PORT"])
	if err != nil || port <= 0 || port > 65535 {
		return nil
	}
	return &runtime.GateSpec{Port: port}
}

// openGate listens on the replica's port on the host and forwards the
// requests that carry key into the replica's own network namespace.
func (a *Agent) openGate(id, dir string, sb runtime.Sandbox, key string) (*gate.Gate, error) {
	g, err := gate.Open(gate.Config{
		Addr: ":" + strconv.Itoa(sb.Gate.Port),
		Key:  key,
		Dial: replicaDialer(dir, sb),
		Log:  a.log.With("replica_id", id, "component", "gate"),
	})
	if err != nil {
		return nil, fmt.Errorf("listening on the service port %d: %w", sb.Gate.Port, err)
	}
	return g, nil
}

// setGate records r's gate, closing one it had.
func (a *Agent) setGate(r *replica, g *gate.Gate) {
	a.mu.Lock()
	old := r.gate
	r.gate = g
	a.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// closeGate stops r's gate, if it has one, so that the port is free for
// the replica that replaces it.
func (a *Agent) closeGate(r *replica) { a.setGate(r, nil) }

// closeGates stops every tracked replica's gate, as the agent stops.
func (a *Agent) closeGates() {
	a.mu.Lock()
	var gates []*gate.Gate
	for _, r := range a.tracked {
		if r.gate != nil {
			gates = append(gates, r.gate)
			r.gate = nil
		}
	}
	a.mu.Unlock()
	for _, g := range gates {
		g.Close()
	}
}

// replicaDialer connects to 127.0.0.1:PORT inside the namespace of the
// replica in dir: a process replica's own child, a container's main
// process (asked of podman once, then while it lives).
func replicaDialer(dir string, sb runtime.Sandbox) func(ctx context.Context) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sb.Gate.Port))
	var mu sync.Mutex
	var cached supervisor.Process
	return func(ctx context.Context) (net.Conn, error) {
		pids, ok, err := supervisor.ReadPIDs(dir)
		if err != nil {
			return nil, err
		}
		if !ok || pids.Child == nil || !supervisor.Alive(pids.Child.PID, pids.Child.Start) {
			return nil, runtime.ErrNotRunning
		}
		pid := pids.Child.PID
		if sb.Runtime == runtime.Container {
			mu.Lock()
			c := cached
			mu.Unlock()
			if !supervisor.Alive(c.PID, c.Start) {
				if c.PID, err = runtime.ContainerPID(ctx, sb.Container.Podman, sb.Container.Name); err != nil {
					return nil, err
				}
				if c.Start, err = supervisor.ProcessStartTime(c.PID); err != nil {
					return nil, err
				}
				mu.Lock()
				cached = c
				mu.Unlock()
			}
			pid = c.PID
		}
		return runtime.DialIn(ctx, pid, addr)
	}
}
