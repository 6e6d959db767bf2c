package agent

import (
	"context"

	"github.com/gpufleet/gpufleet/internal/agent/telemetry"
	"github.com/gpufleet/gpufleet/internal/agentapi"
)

// sampleTelemetry samples the configured source every TelemetryInterval
// until ctx ends, queueing each sample for the next sync. The queue keeps
// the newest agentapi.MaxTelemetrySamples: a server that is away for long
// loses the oldest, never the agent's memory.
func (a *Agent) sampleTelemetry(ctx context.Context) {
	s := telemetry.NewSampler(a.cfg.Telemetry, telemetry.SamplerOptions{
		Interval: a.cfg.TelemetryInterval,
		Keep:     1,
		Clock:    a.cfg.Clock,
		Logger:   a.log,
		OnSample: func(s telemetry.Sample) { a.queueSample(s) },
	})
	s.Run(ctx)
}

// queueSample converts a sample to its wire form and queues it.
func (a *Agent) queueSample(s telemetry.Sample) {
	if len(s.GPUs) == 0 {
		return // no GPU: the source name says so, nothing else to send
	}
	ts := agentapi.TelemetrySample{Time: s.Time, GPUs: make([]agentapi.GPUTelemetry, len(s.GPUs))}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		vals := make(map[string]float64, 8)
		for _, f := range g.Present.Fields() {
			vals[f.String()] = g.Values[f]
		}
		ts.GPUs[i] = agentapi.GPUTelemetry{Index: g.Index, UUID: g.UUID, Values: vals}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.samples) >= agentapi.MaxTelemetrySamples {
		a.samples = append(a.samples[:0], a.samples[1:]...)
	}
	a.samples = append(a.samples, ts)
}

// telemetryRequest returns the queued samples for a sync, or nil when the
// agent has no telemetry source. A machine without GPUs reports source
// "none" and nothing else.
func (a *Agent) telemetryRequest() *agentapi.Telemetry {
	if a.cfg.Telemetry == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := &agentapi.Telemetry{Source: a.cfg.Telemetry.Name()}
	if len(a.samples) > 0 {
		t.Samples = append([]agentapi.TelemetrySample(nil), a.samples...)
	}
	return t
}

// telemetryDelivered drops the samples a sync delivered.
func (a *Agent) telemetryDelivered(t *agentapi.Telemetry) {
	if t == nil || len(t.Samples) == 0 {
		return
	}
	last := t.Samples[len(t.Samples)-1].Time
	a.mu.Lock()
	defer a.mu.Unlock()
	i := 0
	for i < len(a.samples) && !a.samples[i].Time.After(last) {
		i++
	}
	a.samples = append(a.samples[:0], a.samples[i:]...)
}

// BusyGPU reports whether the server wants a replica running on the GPU
// with index i: the simulated telemetry of demo GPUs uses it.
func (a *Agent) BusyGPU(i int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.busy[i]
}
