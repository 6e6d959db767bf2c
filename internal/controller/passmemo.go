package controller

import (
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// passRefresh is the longest a pass keeps the last plan's verdicts while
// none of its inputs changes. Nothing the clock alone changes can place a
// job before a wake-up the memo knows of (scheduler.Plan.Wake), so this only
// bounds how stale the text of verdicts gets (estimated starts, work lost,
// queue order under decayed usage): a full pass over 100,000 queued jobs
// every 5 minutes is under 0.1% of a core.
const passRefresh = 5 * time.Minute

// passInputs is everything a scheduling pass reads besides the clock:
//   - the state's version, which every change of jobs (submissions,
//     cancels, requeues), attempts (starts, ends, stops), nodes
//     (registrations, drains, losses), queues, quotas, priority classes,
//     fair-share usage and nominations raises;
//   - the offers the scale loop could buy now (declared pools, pool sizes,
//     offers in back-off);
//   - the budget holds (budgets component), which change at each cost
//     pass.
type passInputs struct {
	version uint64
	offers  []model.Offer
	holds   []state.Hold
}

// passMemo remembers the inputs of the last pass that ran the scheduler
// and when its plan may go out of date through the clock alone, so that an
// idle controller with a deep queue does no scheduling work: its verdicts
// stay those of the last pass (stale but valid) until an input changes or
// the wake-up passes. Guarded by Controller.mu.
type passMemo struct {
	ran     bool
	version uint64
	offers  []model.Offer
	holds   []state.Hold
	// wake is when the last plan is due again; due is the same without
	// the refresh (what the clock alone changes: NextWake).
	wake, due time.Time
	// schedules counts the passes that ran the scheduler and skipped those
	// that did not (tests and metrics); jobs sums the pending jobs the
	// scheduler was given.
	schedules, skipped, jobs uint64
}

// PassStats counts scheduling passes since the controller started.
type PassStats struct {
	// Scheduled passes ran the scheduler; Skipped ones found its inputs
	// unchanged (or a committed plan settled) and did not.
	Scheduled, Skipped uint64
	// Jobs is the pending jobs the scheduled passes were given, summed:
	// the work of scheduling grows with it.
	Jobs uint64
}

// PassStats returns the pass counts (`gpufleet simulate` reports them).
func (c *Controller) PassStats() PassStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return PassStats{Scheduled: c.memo.schedules, Skipped: c.memo.skipped, Jobs: c.memo.jobs}
}

// current reports whether a pass with inputs in at now would decide what
// the last one did.
func (m *passMemo) current(in passInputs, now time.Time) bool {
	return m.ran && in.version == m.version && now.Before(m.wake) &&
		slices.Equal(in.offers, m.offers) && holdsEqual(in.holds, m.holds)
}

// record notes the inputs of a pass run at now and the plan's own wake-up
// time (zero: none).
func (m *passMemo) record(in passInputs, now, planWake time.Time) {
	m.ran, m.version = true, in.version
	m.offers = append(m.offers[:0], in.offers...)
	m.holds = append(m.holds[:0], in.holds...)
	m.wake, m.due = now.Add(passRefresh), time.Time{}
	earlier := func(t time.Time) {
		if t.After(now) && t.Before(m.wake) {
			m.wake = t
		}
		if t.After(now) && (m.due.IsZero() || t.Before(m.due)) {
			m.due = t
		}
	}
	earlier(planWake)
	// A budget hold ends with its period.
	for _, h := range in.holds {
		earlier(h.Until)
	}
}

// forget makes the next pass run the scheduler whatever its inputs.
func (m *passMemo) forget() { m.ran = false }

func holdsEqual(a, b []state.Hold) bool {
	return slices.EqualFunc(a, b, func(x, y state.Hold) bool {
		return x.Reason == y.Reason && x.SpotOnly == y.SpotOnly && x.Until.Equal(y.Until) &&
			x.Scope.Project == y.Scope.Project && x.Scope.Queue == y.Scope.Queue && maps.Equal(x.Scope.Tags, y.Scope.Tags)
	})
}
