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
}

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
	var value float64
	switch a.policy.Metric {
	case model.ScaleOnRate:
		value = m.Rate
	default:
		value = float64(m.InFlight)
	}
	raw := int(math.Ceil(value/a.policy.Target - 1e-9))
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
		next, reason = up, fmt.Sprintf("%s %.3g over target %.3g per replica", a.policy.Metric, value, a.policy.Target)
	case down < a.current:
		next, reason = down, fmt.Sprintf("%s below target %.3g per replica for %s", a.policy.Metric, a.policy.Target, a.policy.ScaleDownWindow)
	}
	a.current = a.clamp(next)
	return Decision{Replicas: a.current, Raw: raw, Reason: reason}
}
