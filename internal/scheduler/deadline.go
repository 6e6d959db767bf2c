package scheduler

import (
	"math"
	"time"
)

// Deadline risk: whether a job with limits.deadline may run on spot.
//
// The model. Interruptions of a spot instance arrive as a Poisson process
// at the offer's interruption rate λ per instance-hour; a gang on n
// instances is interrupted when any of them is, at rate nλ. Each
// interruption costs the job c = δ/2 + R of wall time: the work done since
// its last checkpoint, on average half the checkpoint interval δ (the
// first-order loss of Young 1974, "A first order approximation to the
// optimum checkpoint interval", CACM 17(9), and of Daly 2006, "A higher
// order estimate of the optimum checkpoint interval for restart dumps",
// FGCS 22(3)), plus the restart time R (a new instance, the checkpoint
// restored). Without checkpoints δ is the whole run. A job of W of work
// that has been interrupted N(t) times by time t has done t − c·N(t) of it,
// so it is done by t whenever N(t) ≤ (t − W)/c. With t = W + k·c for k = 0
// and k = K = ⌊(T − W)/c⌋, T the time left until the deadline, the
// probability of finishing in time is at least
//
//	max( P[Poisson(nλW) = 0], P[Poisson(nλ(W + Kc)) ≤ K] ),
//
// a lower bound, so the rule errs towards on-demand. Spot is chosen only
// when it is at least DeadlineConfidence.

// DeadlineConfidence is the least probability of finishing by
// limits.deadline with which a job is placed on spot capacity.
const DeadlineConfidence = 0.95

// DefaultRestartTime is the restart time of a job that sets no
// spec.checkpoint.restart, on a pool that sets no restartTime.
const DefaultRestartTime = RestartTime

// FinishProbability is a lower bound on the probability that work of length
// work finishes within window, interrupted as a Poisson process at rate
// interruptions per hour (all of the job's instances together), each
// interruption losing half of interval (the whole work when interval is 0
// or longer) plus restart. It is 0 when the work does not fit in the window
// and 1 when nothing interrupts it.
func FinishProbability(work, window time.Duration, rate float64, interval, restart time.Duration) float64 {
	if work <= 0 {
		return 1
	}
	if window < work {
		return 0
	}
	if rate <= 0 {
		return 1
	}
	if interval <= 0 || interval > work {
		interval = work
	}
	c := interval/2 + max(restart, 0)
	k := int64(0)
	if c > 0 {
		k = int64((window - work) / c)
	}
	none := math.Exp(-rate * work.Hours())
	if k == 0 {
		return none
	}
	mean := rate * (work + time.Duration(k)*c).Hours()
	return max(none, poissonCDF(k, mean))
}

// poissonCDF is P[Poisson(mean) ≤ k], summed in log space so that neither a
// large mean nor a large k underflows or overflows.
func poissonCDF(k int64, mean float64) float64 {
	if mean <= 0 {
		return 1
	}
	// Far beyond the mean the tail above k is negligible.
	if float64(k) > mean+12*math.Sqrt(mean)+20 {
		return 1
	}
	logMean := math.Log(mean)
	logTerm := -mean // log P[X = 0]
	sum := 0.0
	for i := int64(0); i <= k; i++ {
		sum += math.Exp(logTerm)
		logTerm += logMean - math.Log(float64(i+1))
	}
	return min(sum, 1)
}

// spotRisk is the verdict on one spot offer or node for a job under a
// deadline: whether it may run there, and the probability it was judged by.
// rate is per instance-hour (0 when unknown), instances how many of them
// the job takes. An unknown rate cannot be weighed, so such capacity must
// leave room for one interruption, as the rule before this model did.
func spotRisk(d deadlineReq, rate float64, instances int, restart time.Duration) (p float64, ok bool) {
	if d.restart > 0 {
		restart = d.restart // the job's own spec.checkpoint.restart wins
	}
	if restart <= 0 {
		restart = DefaultRestartTime
	}
	if rate <= 0 {
		interval := d.interval
		if interval <= 0 || interval > d.work {
			interval = d.work
		}
		if d.window >= d.work+interval/2+restart {
			return 1, true
		}
		return 0, false
	}
	p = FinishProbability(d.work, d.window, rate*float64(max(instances, 1)), d.interval, restart)
	return p, p >= DeadlineConfidence
}

// deadlineReq is what the deadline rule reads of a job: zero (work 0) for
// a job with no deadline, no runtime estimate or limit, or no spot to
// weigh. It is part of fitKey, so jobs that differ in it never share a
// verdict.
type deadlineReq struct {
	work     time.Duration // expected runtime
	window   time.Duration // from now to limits.deadline (may be < 0)
	interval time.Duration // spec.checkpoint.interval
	restart  time.Duration // spec.checkpoint.restart; 0: the pool's, else DefaultRestartTime
}

func (d deadlineReq) set() bool { return d.work > 0 }
