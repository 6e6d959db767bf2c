package cost

import (
	"math"
	"math/bits"

	"github.com/gpufleet/gpufleet/internal/model"
)

// mulDiv returns floor(a*b/c) for non-negative a, b and positive c, exact
// for any product that fits in 128 bits and a quotient that fits in 63
// bits; it saturates at MaxInt64 otherwise.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, c)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return q
}

// mulDivHalfUp is a × b / c rounded half up, saturating like mulDiv.
func mulDivHalfUp(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	var carry uint64
	lo, carry = bits.Add64(lo, c/2, 0)
	hi += carry
	if hi >= c {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, c)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return q
}

// mulDivRem is mulDiv that also returns the remainder (for largest
// remainder splits). The caller guarantees hi < c.
func mulDivRem(a, b, c uint64) (q, r uint64) {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxInt64, 0
	}
	return bits.Div64(hi, lo, c)
}

// Percent returns the share of amount given by percent (e.g. 80 for 80%),
// rounded down to the micro-dollar; percent is taken to two decimals.
func Percent(amount model.Money, percent float64) model.Money {
	if amount <= 0 || percent <= 0 || math.IsNaN(percent) {
		return 0
	}
	bp := uint64(math.Round(percent * 100))
	return model.Money(mulDiv(uint64(amount), bp, 10_000))
}
