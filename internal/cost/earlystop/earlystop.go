// Package earlystop decides whether a run whose metrics stopped improving
// should be flagged or stopped. Policies are pure functions of a job's
// metric history and, for median stopping, its peers' (jobs sharing the
// experiment tag).
//
// Repeated steps: a job resumed from a checkpoint after a spot
// interruption reports some steps again. A Series keeps the latest value
// reported for each step (later reports win), and decisions are taken at
// the highest step seen, so a resume neither double-counts nor resets
// patience.
package earlystop

import (
	"fmt"
	"math"
	"slices"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Kind names a policy.
type Kind string

// Policies.
const (
	Median    Kind = "median"
	Patience  Kind = "patience"
	Threshold Kind = "threshold"
	NaN       Kind = "nan"
)

// Mode says what a triggered policy does.
type Mode string

// Modes.
const (
	Alert Mode = "alert"
	Stop  Mode = "stop"
)

// Report is one metrics report from a job: a step and its values.
type Report struct {
	Step   int64
	Values map[string]float64
}

// Point is one step's value.
type Point struct {
	Step  int64
	Value float64
}

// Series is one metric of one job, a value per step in step order.
type Series []Point

// FromReports builds the series of one metric from reports in arrival
// order, keeping the latest value for a repeated step.
func FromReports(reports []Report, metric string) Series {
	latest := map[int64]float64{}
	for _, r := range reports {
		if v, ok := r.Values[metric]; ok {
			latest[r.Step] = v
		}
	}
	s := make(Series, 0, len(latest))
	for st, v := range latest {
		s = append(s, Point{st, v})
	}
	slices.SortFunc(s, func(a, b Point) int { return int(min(max(a.Step-b.Step, -1), 1)) })
	return s
}

// Policy is one early-stop rule.
type Policy struct {
	Kind   Kind
	Metric string
	// Maximize is set for metrics where higher is better (accuracy);
	// default is lower is better (loss).
	Maximize bool
	// Patience is how many reported steps without an improvement of at
	// least MinDelta are tolerated.
	Patience int
	MinDelta float64
	// Threshold: stop when the latest value is worse than Value.
	Value float64
	// MinSteps is a grace period: no decision before this step.
	MinSteps int64
	// MinPeers is how many peers must have reached the step for median
	// stopping (default 3).
	MinPeers int
	Mode     Mode
}

// FromSpec converts the job spec's early-stop block. The spec calls the
// patience policy "plateau" (model.JobSpec.Validate); both names work.
func FromSpec(e *model.EarlyStop) Policy {
	k := Kind(e.Policy)
	if k == "plateau" {
		k = Patience
	}
	return Policy{Kind: k, Metric: e.Metric, Patience: e.Patience, MinDelta: e.MinDelta, Mode: Mode(e.Mode)}
}

// Validate returns every problem, paths under spec.earlyStop.
func (p Policy) Validate() error {
	var fe model.FieldErrors
	switch p.Kind {
	case Median, Threshold, NaN:
	case Patience:
		if p.Patience <= 0 {
			fe.Add("spec.earlyStop.patience", "must be > 0")
		}
	default:
		fe.Add("spec.earlyStop.policy", "must be median, patience, threshold or nan")
	}
	if p.Metric == "" {
		fe.Add("spec.earlyStop.metric", "must be set")
	}
	if p.MinDelta < 0 || math.IsNaN(p.MinDelta) {
		fe.Add("spec.earlyStop.minDelta", "must be >= 0")
	}
	switch p.Mode {
	case "", Alert, Stop:
	default:
		fe.Add("spec.earlyStop.mode", `must be "alert" or "stop"`)
	}
	return fe.Err()
}

// Verdict is a policy's decision. Triggered with Mode alert means flag
// only; Stop is set only when triggered in stop mode (the default).
type Verdict struct {
	Triggered bool
	Stop      bool
	Step      int64
	Reason    string
}

// better reports whether a improves on b by more than delta.
func (p Policy) better(a, b, delta float64) bool {
	if p.Maximize {
		return a > b+delta
	}
	return a < b-delta
}

// Decide applies p to a job's series; peers are other runs of the same
// experiment (used by median only).
func Decide(p Policy, s Series, peers []Series) Verdict {
	if len(s) == 0 {
		return Verdict{}
	}
	last := s[len(s)-1]
	v := Verdict{Step: last.Step}
	if last.Step < p.MinSteps && p.Kind != NaN {
		return v
	}
	switch p.Kind {
	case NaN:
		if math.IsNaN(last.Value) || math.IsInf(last.Value, 0) {
			v.Triggered, v.Reason = true, fmt.Sprintf("%s is %v at step %d", p.Metric, last.Value, last.Step)
		}
	case Threshold:
		if p.better(p.Value, last.Value, 0) {
			v.Triggered, v.Reason = true, fmt.Sprintf("%s %g at step %d is worse than the threshold %g", p.Metric, last.Value, last.Step, p.Value)
		}
	case Patience:
		best, since := math.NaN(), 0
		for _, pt := range s {
			if math.IsNaN(pt.Value) {
				since++
				continue
			}
			if math.IsNaN(best) || p.better(pt.Value, best, p.MinDelta) {
				best, since = pt.Value, 0
			} else {
				since++
			}
		}
		if p.Patience > 0 && since >= p.Patience {
			v.Triggered, v.Reason = true, fmt.Sprintf("%s has not improved by %g in %d reported steps (best %g)", p.Metric, p.MinDelta, since, best)
		}
	case Median:
		v = p.median(s, peers, v)
	}
	v.Stop = v.Triggered && p.Mode != Alert
	return v
}

// median is the median stopping rule: stop at step t if the run's best
// value so far is strictly worse than the median, over peers that reached
// t, of each peer's best value by step t. The median is a true median (the
// mean of the two middle values for an even count).
//
// Sources: Golovin et al., "Google Vizier: A Service for Black-Box
// Optimization", KDD 2017, §3.2.2 (a trial's best objective by step s
// against the median of the other trials' values up to s); Optuna's
// MedianPruner (optuna.pruners.MedianPruner: "prune if the trial's best
// intermediate result is worse than median of intermediate results of
// previous trials at the same step"). A peer's value "at step t" is its
// best by t here, because runs report at different steps (and resumed
// runs repeat some): for the improving curves the rule is meant for it is
// the peer's value at t, and unlike a running average it does not charge
// a peer for its early, worse values, which made the rule stop runs that
// were as good as their peers.
func (p Policy) median(s Series, peers []Series, v Verdict) Verdict {
	t := v.Step
	best := p.bestBy(s, t)
	var bests []float64
	for _, peer := range peers {
		if len(peer) == 0 || peer[len(peer)-1].Step < t {
			continue
		}
		if b := p.bestBy(peer, t); !math.IsNaN(b) {
			bests = append(bests, b)
		}
	}
	minPeers := p.MinPeers
	if minPeers <= 0 {
		minPeers = 3
	}
	if len(bests) < minPeers || math.IsNaN(best) {
		return v
	}
	slices.Sort(bests)
	m := bests[len(bests)/2]
	if len(bests)%2 == 0 {
		m = (bests[len(bests)/2-1] + m) / 2
	}
	if p.better(m, best, 0) {
		v.Triggered = true
		v.Reason = fmt.Sprintf("best %s %g by step %d is worse than the median %g of %d peers' best values by that step", p.Metric, best, t, m, len(bests))
	}
	return v
}

// bestBy is the best non-NaN value of s at steps up to t (NaN if none).
func (p Policy) bestBy(s Series, t int64) float64 {
	best := math.NaN()
	for _, pt := range s {
		if pt.Step > t {
			break
		}
		if !math.IsNaN(pt.Value) && (math.IsNaN(best) || p.better(pt.Value, best, 0)) {
			best = pt.Value
		}
	}
	return best
}
