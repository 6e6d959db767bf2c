package services

import (
	"fmt"
	"math"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Load is what the proxy measured of one service at one moment.
type Load struct {
	// Ready is how many replicas take traffic now.
	Ready int
	// InFlight counts requests being served or held for a replica.
	InFlight int
	// Rate is requests per second over the last few seconds.
	Rate float64
	// Waiting counts requests held because no replica is ready.
	Waiting int
	// P95 is the 95th percentile of the time to a response's first byte
	// over the last 30 s, and Samples how many requests it rests on.
	P95     time.Duration
	Samples int
}

// Latency scaling's constants.
const (
	// latencyTolerance is the band around the target within which the
	// p95 asks for no change (as Kubernetes' HPA's 10%): a measure that
	// wobbles around its target does not move the count.
	latencyTolerance = 0.1
	// minLatencySamples is the fewest requests a p95 is trusted on; with
	// fewer the count holds (or, with no traffic at all, may fall).
	minLatencySamples = 20
)

// Decision is an autoscaler's answer: the replica count and why.
type Decision struct {
	Replicas int
	// Raw is what the metric alone asks for, before bounds and windows.
	Raw    int
	Reason string
}

// Autoscaler decides a service's replica count from its metrics. Its only
// state is the recommendations of the last stabilisation window; it reads
// no clock of its own, so tests pass now. It is not safe for concurrent
// use: the Manager calls it under its lock.
type Autoscaler struct {
	policy  model.ServiceAutoscaling
	bounds  model.ServiceReplicas
	current int
	history []sample
}

type sample struct {
	at   time.Time
	want int
}

// NewAutoscaler starts at the spec's target (or min) replicas.
func NewAutoscaler(spec model.ServiceSpec) *Autoscaler {
	a := &Autoscaler{policy: spec.Autoscaling, bounds: spec.Replicas}
	a.current = a.clamp(max(spec.Replicas.Target, spec.Replicas.Min))
	return a
}

// Resume makes n (bounded by min and max) the current count at now, as if
// recommended then: the replicas found running after a restart, or the
// count before a policy change, are kept for the scale-down window rather
// than dropped to the minimum.
func (a *Autoscaler) Resume(n int, now time.Time) {
	a.current = a.clamp(n)
	a.history = append(a.history, sample{now, a.current})
}

// Current is the count last decided.
func (a *Autoscaler) Current() int { return a.current }

func (a *Autoscaler) clamp(n int) int { return min(max(n, a.bounds.Min), a.bounds.Max) }

// Decide returns the replica count for m at now. Without a metric it is
// the target. With one, the raw count is ceil(metric / target per
// replica); a scale-up takes the lowest raw count seen over the scale-up
// window (so a spike must last), a scale-down the highest over the
// scale-down window (so a lull must last). A request waiting with no
// replica ready scales from zero at once: the window protects against
// flapping, not against the first replica.
func (a *Autoscaler) Decide(m Load, now time.Time) Decision {
	if a.policy.Metric == "" {
		a.current = a.clamp(a.bounds.Target)
		return Decision{Replicas: a.current, Raw: a.bounds.Target, Reason: "fixed target"}
	}
	var raw int
	var over, under string // the reasons for a scale-up, a scale-down
	switch a.policy.Metric {
	case model.ScaleOnLatency:
		raw, over, under = a.latencyRaw(m)
	default:
		value := float64(m.InFlight)
		if a.policy.Metric == model.ScaleOnRate {
			value = m.Rate
		}
		raw = int(math.Ceil(value/a.policy.Target - 1e-9))
		over = fmt.Sprintf("%s %.3g over target %.3g per replica", a.policy.Metric, value, a.policy.Target)
		under = fmt.Sprintf("%s below target %.3g per replica for %s", a.policy.Metric, a.policy.Target, a.policy.ScaleDownWindow)
	}
	a.history = append(a.history, sample{now, raw})
	keep := max(a.policy.ScaleUpWindow.D(), a.policy.ScaleDownWindow.D())
	i := 0
	for i < len(a.history) && now.Sub(a.history[i].at) > keep {
		i++
	}
	a.history = a.history[i:]
	up, down := raw, raw // lowest in the up window, highest in the down window
	for _, s := range a.history {
		age := now.Sub(s.at)
		if age <= a.policy.ScaleUpWindow.D() {
			up = min(up, s.want)
		}
		if age <= a.policy.ScaleDownWindow.D() {
			down = max(down, s.want)
		}
	}
	next, reason := a.current, "within the stabilisation windows"
	switch {
	case a.current == 0 && (m.Waiting > 0 || raw > 0):
		next, reason = max(raw, 1), "scale from zero: requests waiting"
	case up > a.current:
		next, reason = up, over
	case down < a.current:
		next, reason = down, under
	}
	a.current = a.clamp(next)
	return Decision{Replicas: a.current, Raw: raw, Reason: reason}
}

// latencyRaw is the count the p95 latency alone asks for, and the reasons
// to give for a scale-up and a scale-down. Latency is not a per-replica
// quantity, so the count is proportional (as the HPA's): ready replicas ×
// p95 / target, on the assumption that latency grows with the load per
// replica. Within the tolerance band it asks for the current count; on too
// few requests it holds too, unless there was no traffic at all, when it
// asks for none (the scale-down window and min still apply).
func (a *Autoscaler) latencyRaw(m Load) (raw int, over, under string) {
	target := time.Duration(a.policy.Target * float64(time.Second))
	under = fmt.Sprintf("p95 latency below target %s for %s", target, a.policy.ScaleDownWindow)
	if m.Samples < minLatencySamples {
		if m.Samples == 0 && m.InFlight == 0 && m.Waiting == 0 && m.Rate == 0 {
			return 0, "", fmt.Sprintf("no requests for %s", a.policy.ScaleDownWindow)
		}
		return a.current, "", under
	}
	ratio := m.P95.Seconds() / a.policy.Target
	over = fmt.Sprintf("p95 latency %s over target %s with %d ready", m.P95.Round(time.Millisecond), target, m.Ready)
	if math.Abs(ratio-1) <= latencyTolerance {
		return a.current, over, under
	}
	return int(math.Ceil(float64(max(m.Ready, 1))*ratio - 1e-9)), over, under
}
