package controller

import "context"

// Step runs what Run does for a kick and then a tick, synchronously: a
// scheduling pass (new submissions get their verdicts), node health, a
// scale cycle (waiting for the launches it queued), efficiency rules,
// checkpoint markers, and another pass. It is for simulation on a fake
// clock (`gpufleet simulate`), whose caller advances the clock between
// steps and plays the agents; it must not be called while Run runs.
func (c *Controller) Step(ctx context.Context) error {
	if err := c.pass(ctx); err != nil {
		return err
	}
	c.checkNodes(ctx)
	c.scale(ctx)
	c.WaitLaunches()
	c.evaluate(c.cfg.Clock.Now())
	c.watchCheckpoints(ctx)
	return c.pass(ctx)
}
