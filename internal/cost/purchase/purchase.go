// Package purchase recommends how much GPU capacity to commit to
// (reserved instances, savings plans, committed-use discounts) and how
// much interruptible work could move to spot, from hourly usage.
//
// The commitment level. Let u_t be GPUs in use in hour t (H hours), p the
// on-demand price per GPU-hour and c = p(1−d) the committed price. Commit
// k GPUs and the cost is
//
//	C(k) = k·c·H + p·Σ_t max(0, u_t − k)
//
// C is convex and piecewise linear in k. Raising k by one costs c·H and
// saves p in every hour where u_t > k, so it pays while
// P(u > k) > c/p = 1 − d. The optimum is therefore the smallest k with
// P(u > k) ≤ 1 − d: the d-quantile of hourly usage (equivalently, the
// level exceeded in a fraction 1 − d of hours). Recommend evaluates C(k)
// exactly for every integer k from sorted usage, which gives that
// quantile without interpolation.
//
// Floats are fine here: these are estimates, not ledger amounts.
package purchase

import (
	"fmt"
	"math"
	"slices"
)

// Lookbacks are the allowed windows, in days.
var Lookbacks = []int{7, 30, 60}

// Term is a commitment offer.
type Term struct {
	Cloud  string
	Months int // 12 or 36
	// Discount is 1 − committed / on-demand price, e.g. 0.35.
	Discount float64
	// Upfront is the fraction of the term's commitment paid at purchase
	// (0 = no upfront, 0.5 partial, 1 all upfront).
	Upfront float64
}

// DefaultDiscounts are used where the catalog has no reserved price:
// typical published GPU-instance discounts for no-upfront commitments,
// keyed by cloud and term months. They are parameters, not facts; pass
// your negotiated rates instead.
var DefaultDiscounts = map[string]map[int]float64{
	"aws":   {12: 0.30, 36: 0.50}, // EC2 Instance Savings Plans, accelerated instances
	"gcp":   {12: 0.37, 36: 0.55}, // resource-based committed use discounts
	"azure": {12: 0.35, 36: 0.55}, // reserved VM instances
}

// Discount returns the committed discount for a cloud and term from
// table (DefaultDiscounts when nil); ok is false when unknown.
func Discount(table map[string]map[int]float64, cloud string, months int) (float64, bool) {
	if table == nil {
		table = DefaultDiscounts
	}
	d, ok := table[cloud][months]
	return d, ok
}

// Input is one GPU model's usage.
type Input struct {
	GPUModel string
	// Usage is GPUs in use per hour over the lookback, oldest first.
	Usage []float64
	// Interruptible is, per hour, GPUs used by work that tolerates
	// interruption (spot allowed, checkpoints); same length as Usage or
	// empty.
	Interruptible []float64
	// OnDemand is the price per GPU-hour; Term the commitment on offer.
	OnDemand float64
	Term     Term
	// SpotPrice per GPU-hour and SpotOverhead, the fraction of spot hours
	// lost to interruptions (rework, restarts), e.g. 0.1.
	SpotPrice    float64
	SpotOverhead float64
}

// Recommendation is the answer for one GPU model.
type Recommendation struct {
	GPUModel string
	// Commit is the recommended committed GPUs.
	Commit int
	// Utilisation is committed GPU-hours actually used / committed.
	Utilisation float64
	// Coverage is usage served by the commitment / all usage.
	Coverage float64
	// OnDemandCost is the lookback's cost all on demand; MixedCost with
	// the commitment (the rest on demand); SavingsPercent between them.
	OnDemandCost, MixedCost, SavingsPercent float64
	// BreakEvenMonths is when cumulative savings repay the upfront
	// payment; 0 without upfront, +Inf if it never pays.
	BreakEvenMonths float64
	// SpotShare is the share of on-demand (uncommitted) GPU-hours that is
	// interruptible and could run on spot; SpotSaving the expected saving
	// over the lookback after SpotOverhead.
	SpotShare, SpotSaving float64
	Reason                string
}

// Recommend picks the commitment for one GPU model (see the package doc).
func Recommend(in Input) (Recommendation, error) {
	rec := Recommendation{GPUModel: in.GPUModel}
	H := len(in.Usage)
	if H == 0 {
		return rec, fmt.Errorf("recommending for %s: no usage", in.GPUModel)
	}
	if !(in.OnDemand > 0) || in.Term.Discount < 0 || in.Term.Discount >= 1 || in.Term.Months <= 0 {
		return rec, fmt.Errorf("recommending for %s: need on-demand price > 0, discount in [0,1) and a term", in.GPUModel)
	}
	if len(in.Interruptible) != 0 && len(in.Interruptible) != H {
		return rec, fmt.Errorf("recommending for %s: interruptible series has %d hours, usage %d", in.GPUModel, len(in.Interruptible), H)
	}
	p, c := in.OnDemand, in.OnDemand*(1-in.Term.Discount)
	u := make([]float64, H)
	for i, v := range in.Usage {
		u[i] = math.Max(v, 0)
	}
	sorted := slices.Clone(u)
	slices.Sort(sorted)
	var total float64
	for _, v := range u {
		total += v
	}
	// cost(k) with a moving pointer: above(k) = Σ max(0, u−k).
	bestK, bestCost := 0, p*total
	maxK := int(math.Ceil(sorted[H-1]))
	for k, i := 1, 0; k <= maxK; k++ {
		for i < H && sorted[i] <= float64(k) {
			i++
		}
		var above float64
		for _, v := range sorted[i:] {
			above += v - float64(k)
		}
		if cost := float64(k)*c*float64(H) + p*above; cost < bestCost-1e-9 {
			bestK, bestCost = k, cost
		}
	}
	rec.Commit, rec.OnDemandCost, rec.MixedCost = bestK, p*total, bestCost
	var served, uncoveredInt, uncovered float64
	for t, v := range u {
		s := math.Min(v, float64(bestK))
		served += s
		left := v - s
		uncovered += left
		if len(in.Interruptible) > 0 {
			uncoveredInt += math.Min(math.Max(in.Interruptible[t], 0), left)
		}
	}
	if bestK > 0 {
		rec.Utilisation = served / (float64(bestK) * float64(H))
	}
	if total > 0 {
		rec.Coverage = served / total
		rec.SavingsPercent = 100 * (rec.OnDemandCost - rec.MixedCost) / rec.OnDemandCost
	}
	// Break-even: the upfront part is paid at purchase; each month saves
	// (on-demand cost of served hours − recurring commitment).
	hoursPerMonth := 730.0
	perMonth := float64(H) / hoursPerMonth
	if in.Term.Upfront > 0 && bestK > 0 {
		upfront := in.Term.Upfront * c * float64(bestK) * hoursPerMonth * float64(in.Term.Months)
		monthly := p*served/perMonth - (1-in.Term.Upfront)*c*float64(bestK)*hoursPerMonth
		rec.BreakEvenMonths = math.Inf(1)
		if monthly > 0 {
			rec.BreakEvenMonths = upfront / monthly
		}
	}
	if uncovered > 0 {
		rec.SpotShare = uncoveredInt / uncovered
	}
	if in.SpotPrice > 0 {
		rec.SpotSaving = math.Max(0, uncoveredInt*(p-in.SpotPrice*(1+in.SpotOverhead)))
	}
	rec.Reason = fmt.Sprintf("commit %d GPUs: usage exceeds it in %.0f%% of hours, at or below 1−discount = %.0f%%",
		bestK, 100*exceed(sorted, bestK), 100*(1-in.Term.Discount))
	return rec, nil
}

func exceed(sorted []float64, k int) float64 {
	i, _ := slices.BinarySearchFunc(sorted, float64(k), func(a, b float64) int {
		if a <= b {
			return -1
		}
		return 1
	})
	return float64(len(sorted)-i) / float64(len(sorted))
}
