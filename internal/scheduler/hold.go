package scheduler

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/state"
)

// applyHolds gives every pending job a budget hold keeps waiting its
// verdict in verdicts (filled by snap.Pending's order), and returns the
// snapshot the pass schedules: snap itself when nothing is held, else a
// copy without the held jobs (snap is not changed), with the place in
// snap.Pending of each job it keeps (nil: the same places). A held job
// has no queue position: it is not in the queue's order this pass.
func applyHolds(snap *state.Snapshot, now time.Time, verdicts *Verdicts) (*state.Snapshot, []int) {
	if len(snap.Holds) == 0 || len(snap.Pending) == 0 {
		return snap, nil
	}
	kept := make([]*model.Job, 0, len(snap.Pending))
	var slots []int
	for i, j := range snap.Pending {
		if why := heldBy(snap.Holds, j, now); why != "" {
			verdicts.put(i, Verdict{Queue: j.Spec.Queue, Reasons: []Reason{{Scope: "job", Message: why}}})
			continue
		}
		kept = append(kept, j)
		slots = append(slots, i)
	}
	if len(kept) == len(snap.Pending) {
		return snap, nil
	}
	cp := *snap
	cp.Pending, cp.PendingGen = kept, 0 // not the state's list
	return &cp, slots
}

// heldBy is why a hold keeps j waiting at now, "" when none does: the
// first hold on every job in j's scope, else the first spot-only one when
// j may run on spot.
func heldBy(holds []state.Hold, j *model.Job, now time.Time) string {
	for _, h := range holds {
		if !h.SpotOnly && now.Before(h.Until) && h.Scope.Matches(j.Project, j.Spec.Queue, j.Tags) {
			return "held by " + h.Reason
		}
	}
	if j.Spec.Spot == model.SpotNever {
		return ""
	}
	for _, h := range holds {
		if h.SpotOnly && now.Before(h.Until) && h.Scope.Matches(j.Project, j.Spec.Queue, j.Tags) {
			return "held by " + h.Reason + " (the job may run on spot)"
		}
	}
	return ""
}
