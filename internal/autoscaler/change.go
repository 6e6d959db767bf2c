package autoscaler

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// NextChange is the earliest time after in.Now at which Decide, given in
// with only Now moved later, can answer differently; zero when the clock
// alone never changes its answer. Decide reads the clock in four
// comparisons only, each turning once: a launching node times out
// strictly past LaunchTimeout, a ready idle node of a launching pool is
// idle at IdleSince plus its pool's idle timeout, an offer's back-off
// (Memory.Until) and an unavailability (Unavailable.Until) end at their
// times. Before the earliest of these every comparison, so every
// decision, is what it was at in.Now.
func (in Input) NextChange() time.Time {
	var at time.Time
	consider := func(t time.Time) {
		if t.After(in.Now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	timeout := in.LaunchTimeout
	if timeout <= 0 {
		timeout = DefaultLaunchTimeout
	}
	pools := make(map[string]*model.NodePool, len(in.Pools))
	for _, p := range in.Pools {
		pools[p.Name] = p
	}
	for _, n := range in.Nodes {
		switch n.State {
		case model.NodeLaunching:
			consider(n.LaunchedAt.Add(timeout + time.Nanosecond))
		case model.NodeReady:
			if p := pools[n.Pool]; p != nil && !n.Busy {
				to := p.Spec.IdleTimeout.D()
				if to <= 0 {
					to = DefaultIdleTimeout
				}
				consider(n.IdleSince.Add(to))
			}
		}
	}
	if m := in.Memory; m != nil {
		for _, t := range m.Until {
			consider(t)
		}
		for _, u := range m.Unavailable {
			consider(u.Until)
		}
	}
	return at
}
