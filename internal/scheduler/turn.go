package scheduler

import "slices"

// A blocked job's turn (placement failed, no backfill, no preemption, no
// reservation) changes nothing in the pass: placement's trials are rolled
// back, backfill closes the reservations it opened, and the preemption
// checks that stop before a victim search only read. So a later job that
// the turn reads alike, taking it while nothing else has changed, is
// blocked with the same reasons; a deep queue of jobs of a few shapes then
// costs one turn per shape and change, not one per job.
//
// What the turn reads of the job is its turnKey: its feasibility (one per
// fitKey: GPUs, replicas, share, CPU, memory, interconnect, models,
// regions, selectors, spot and deadline policy, image, CUDA), its queue
// and project (quota), its priority class value (preemption's
// eligibility and explainFixed), and how many reservations its runtime
// estimate lets it backfill into (the reservations that start after it
// would end are a prefix of any longer list, so equal counts are equal
// sets). Its datasets steer placement, so jobs with data are never
// remembered; nor are jobs with nominated GPUs, whose turn runs on a
// cluster with those GPUs given back.
//
// What the turn reads of the pass is the working cluster (free GPUs, CPU,
// memory, shared fractions, reservations), queue, cohort and project use,
// and the preemption counters. The first changes only through a binding,
// a reservation that holds GPUs, a preemption, or a nominated job's turn;
// each bumps s.epoch. A victim search that finds candidates moves quota
// and gives it back (not always bit for bit in floating point) and counts
// in s.searches; a preemption counts in s.preemptors. turnAt is all three.
// Whether the job's queue already holds its reservation (EASY: one per
// queue and pass) only ever becomes true, and a turn is remembered only
// when reserve did nothing because of it (or of the reservations' cap, or
// the job's shape), so that stays true too.
//
// TestTurnReuseChangesNothing compares every plan with and without reuse.
type turnKey struct {
	f    *feasibility
	q    *queueState
	proj *projectState
	prio int
	open int
}

type turnAt struct {
	epoch                uint64
	preemptors, searches int
}

type turnMemo struct {
	at turnAt
	// reasons are the verdict's reasons before candidates, clipped: a
	// verdict that adds to them copies.
	reasons []Reason
}

func (s *sched) turnAt() turnAt {
	return turnAt{epoch: s.epoch, preemptors: s.preemptors, searches: s.searches}
}

// turnKeyOf is pj's turnKey, and false when its turn is not remembered.
func (s *sched) turnKeyOf(pj *pjob, f *feasibility) (turnKey, bool) {
	if s.turns == nil || len(pj.data) > 0 || len(s.nominated[pj.id]) > 0 {
		return turnKey{}, false
	}
	k := turnKey{f: f, q: pj.q, proj: pj.proj, prio: pj.prio}
	if len(s.resv) > 0 && pj.runtime > 0 && pj.g > 0 {
		// As backfill opens them.
		end := s.now.Add(pj.runtime)
		for _, r := range s.resv {
			if r.mask != 0 && !end.After(r.start) {
				k.open++
			}
		}
	}
	return k, true
}

// reusedTurn gives pj the verdict reasons of a remembered turn of its key
// taken at the pass's present state, if there is one.
func (s *sched) reusedTurn(k turnKey) ([]Reason, bool) {
	m, ok := s.turns[k]
	if !ok || m.at != s.turnAt() {
		return nil, false
	}
	s.turnsReused++
	return m.reasons, true
}

// rememberTurn records a blocked turn that began at at and ended with
// reasons, if it changed nothing: reserve was skipped (reserveSkips held
// before it ran) and no victim search counted, so the pass is where it
// was.
func (s *sched) rememberTurn(k turnKey, at turnAt, reasons []Reason) {
	if s.turnAt() == at {
		s.turns[k] = turnMemo{at: at, reasons: slices.Clip(reasons)}
	}
}

// reserveSkips reports whether reserve returns at once for pj, and will
// for every later job of its queue and shape in this pass.
func (s *sched) reserveSkips(pj *pjob) bool {
	return pj.q.reserved || len(s.resv) >= maxReservations*8 || pj.g == 0 || pj.share > 0
}
