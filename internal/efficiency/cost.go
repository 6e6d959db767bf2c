package efficiency

import (
	"math"
	"math/bits"
)

// EffectiveCost is the part of an allocated cost that bought SM activity:
// allocatedMicroDollars × smActive, in integer micro-dollars, shown beside
// the cost so that an idle allocation's waste is visible.
//
// smActive is clamped to [0, 1] and quantised to parts per million
// (round half up) before the integer product, which is rounded half away
// from zero to the micro-dollar; the product cannot overflow, so the
// result never exceeds the allocated cost in magnitude. NaN (SM active
// unknown) gives 0: callers without SM active should show no effective
// cost rather than this zero.
func EffectiveCost(allocatedMicroDollars int64, smActive float64) int64 {
	if math.IsNaN(smActive) || smActive <= 0 {
		return 0
	}
	if smActive >= 1 {
		return allocatedMicroDollars
	}
	ppm := uint64(math.Floor(smActive*1e6 + 0.5))
	neg := allocatedMicroDollars < 0
	a := uint64(allocatedMicroDollars)
	if neg {
		a = -a
	}
	hi, lo := bits.Mul64(a, ppm)
	lo, carry := bits.Add64(lo, 500_000, 0) // round half up on the magnitude
	hi += carry
	q, _ := bits.Div64(hi, lo, 1_000_000) // hi < 1e6 as ppm ≤ 1e6, so no panic
	r := int64(q)
	if neg {
		r = -r
	}
	return r
}
