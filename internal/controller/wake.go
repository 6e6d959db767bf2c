package controller

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/autoscaler"
	"github.com/gpufleet/gpufleet/internal/model"
)

// NextWake is the earliest time after now at which the clock alone can
// change what Step does, with no submission, agent report or provider
// event in between: the last plan's wake-up (back-off ends, nomination
// expiries, deadline rechecks, budget hold ends), an idle node's idle
// timeout, a launching node's launch timeout, the end of an offer's
// back-off or unavailability. A simulation on a fake clock jumps to the
// earlier of it and its own next event instead of ticking; false when
// nothing is due.
func (c *Controller) NextWake() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	var at time.Time
	consider := func(t time.Time) {
		if t.After(now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	consider(c.memo.due)
	pools := c.fleet.pools
	if len(pools) == 0 {
		pools = c.cfg.Scale.DefaultPools
	}
	idle := func(pool string) time.Duration {
		for _, p := range pools {
			if p.Name == pool && p.Spec.IdleTimeout > 0 {
				return p.Spec.IdleTimeout.D()
			}
		}
		return autoscaler.DefaultIdleTimeout
	}
	for id, since := range c.scaleSt.idleSince {
		if n, ok := c.st.Node(id); ok {
			consider(since.Add(idle(n.Pool)))
		}
	}
	launchTimeout := c.cfg.Scale.LaunchTimeout
	if launchTimeout <= 0 {
		launchTimeout = autoscaler.DefaultLaunchTimeout
	}
	for _, n := range c.st.ActiveNodes() {
		if n.State == model.NodeLaunching && n.Pool != "" {
			// Decide times a launch out once strictly past the timeout.
			consider(n.RegisteredAt.Add(launchTimeout + time.Nanosecond))
		}
	}
	m := &c.scaleSt.memory
	for _, t := range m.Until {
		consider(t)
	}
	for _, u := range m.Unavailable {
		consider(u.Until)
	}
	return at, !at.IsZero()
}
