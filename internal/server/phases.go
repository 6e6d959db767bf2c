package server

import (
	"log/slog"
	"time"
)

// phases times the steps of a start (or of a takeover, from the lease on),
// so a slow one shows in the "gpufleet is up" line rather than as an
// unexplained gap before it. Each step is also logged at debug level.
type phases struct {
	log   *slog.Logger
	start time.Time
	last  time.Time
	took  []any // name, duration pairs, in order
}

func newPhases(log *slog.Logger) *phases {
	now := time.Now()
	return &phases{log: log, start: now, last: now}
}

// restart counts the steps from now (a replica's takeover, after its
// campaign), dropping those before.
func (p *phases) restart() {
	p.start, p.last, p.took = time.Now(), time.Now(), nil
}

// done records that step name ended now.
func (p *phases) done(name string) {
	now := time.Now()
	d := now.Sub(p.last).Round(time.Millisecond)
	p.last = now
	p.took = append(p.took, name, d.String())
	p.log.Debug("start: step done", "step", name, "took", d.String())
}

// attr is the steps so far as one attribute, with their total.
func (p *phases) attr() slog.Attr {
	return slog.Group("start", append(p.took, "total", time.Since(p.start).Round(time.Millisecond).String())...)
}
