package efficiency

import (
	"slices"
	"time"
)

// Change is an attempt's class changing: the output alerting hooks on
// ("attempt X idle since T").
type Change struct {
	Attempt string    `json:"attempt"`
	At      time.Time `json:"at"`
	From    Class     `json:"from"`
	To      Class     `json:"to"`
	// Since is when the new class began: IdleSince for Idle, else At.
	Since   time.Time `json:"since"`
	Verdict Verdict   `json:"verdict"`
}

// Tracker keeps a History and the last Verdict of each running attempt
// and reports class changes. It is pure and not safe for concurrent use:
// the caller (one loop) feeds it observations and asks for changes.
type Tracker struct {
	th       Thresholds
	attempts map[string]*tracked
}

type tracked struct {
	h       *History
	verdict Verdict
	since   time.Time
}

// NewTracker returns a tracker judging with th (zero fields default).
func NewTracker(th Thresholds) *Tracker {
	return &Tracker{th: th.withDefaults(), attempts: map[string]*tracked{}}
}

// Observe attributes one sample of a node's GPUs to the attempts running
// there — allocations maps attempt ids to their GPU UUIDs on this node —
// and adds an observation to each attempt's history. hostIOWait is the
// node's I/O wait fraction over the sample interval (NaN if unknown).
func (t *Tracker) Observe(at time.Time, readings []Reading, allocations map[string][]string, hostIOWait float64) {
	for id, uuids := range allocations {
		obs, ok := Attribute(at, readings, uuids, hostIOWait)
		if !ok {
			continue
		}
		t.history(id).Add(obs)
	}
}

// Add records an observation already attributed to an attempt.
func (t *Tracker) Add(attempt string, obs Observation) { t.history(attempt).Add(obs) }

func (t *Tracker) history(id string) *History {
	a := t.attempts[id]
	if a == nil {
		a = &tracked{h: NewHistory(), verdict: Verdict{Class: Unknown}}
		t.attempts[id] = a
	}
	return a.h
}

// Evaluate classifies every tracked attempt at now and returns the ones
// whose class changed since the last Evaluate, sorted by attempt id. An
// attempt's first verdict is a change from Unknown only when it is not
// Unknown.
func (t *Tracker) Evaluate(now time.Time) []Change {
	var out []Change
	for id, a := range t.attempts {
		v := Classify(a.h, now, t.th)
		prev := a.verdict.Class
		if v.Class != prev {
			since := now
			if v.Class == Idle {
				since = v.IdleSince
			}
			a.since = since
			out = append(out, Change{Attempt: id, At: now, From: prev, To: v.Class, Since: since, Verdict: v})
		}
		a.verdict = v
	}
	slices.SortFunc(out, func(a, b Change) int {
		if a.Attempt < b.Attempt {
			return -1
		}
		if a.Attempt > b.Attempt {
			return 1
		}
		return 0
	})
	return out
}

// Verdict returns an attempt's last verdict and since when its class has
// held; false for an attempt not tracked.
func (t *Tracker) Verdict(attempt string) (v Verdict, since time.Time, ok bool) {
	a := t.attempts[attempt]
	if a == nil {
		return Verdict{}, time.Time{}, false
	}
	return a.verdict, a.since, true
}

// History returns an attempt's history (read-only for the caller), nil if
// not tracked.
func (t *Tracker) History(attempt string) *History {
	if a := t.attempts[attempt]; a != nil {
		return a.h
	}
	return nil
}

// Forget drops an attempt that ended.
func (t *Tracker) Forget(attempt string) { delete(t.attempts, attempt) }

// Attempts lists the tracked attempts, sorted.
func (t *Tracker) Attempts() []string {
	ids := make([]string, 0, len(t.attempts))
	for id := range t.attempts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
