package cost

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Money is an amount in integer micro-dollars (1e-6 USD). Ledger amounts
// are never floats; floats appear only in estimates (forecasts, purchase
// recommendations) and are converted back with FromDollars.
type Money int64

// Common amounts.
const (
	Microdollar Money = 1
	Cent        Money = 10_000
	Dollar      Money = 1_000_000
)

// FromDollars converts a float dollar amount to Money, rounding half away
// from zero to the nearest micro-dollar. NaN converts to 0; values beyond
// the int64 range saturate.
func FromDollars(d float64) Money {
	if math.IsNaN(d) {
		return 0
	}
	v := math.Round(d * 1e6)
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	if v <= math.MinInt64 {
		return math.MinInt64
	}
	return Money(v)
}

// Dollars returns m as a float, for display and estimates only.
func (m Money) Dollars() float64 { return float64(m) / 1e6 }

// String writes m with all six decimals: "$12.345678", "-$0.000001".
func (m Money) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-m) // MinInt64 wraps to itself, which is its magnitude as uint64
	}
	s := fmt.Sprintf("$%d.%06d", u/1e6, u%1e6)
	if neg {
		return "-" + s
	}
	return s
}

// USD writes m as people read money, in dollars and cents rounded half
// away from zero: "$172.80", "-$0.01". Messages use it; String keeps every
// micro-dollar for the ledger's exports.
func (m Money) USD() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-m)
	}
	cents := u/uint64(Cent) + (u%uint64(Cent)+uint64(Cent)/2)/uint64(Cent)
	s := fmt.Sprintf("$%d.%02d", cents/100, cents%100)
	if neg && cents > 0 {
		return "-" + s
	}
	return s
}

// ParseMoney reads "$12.34", "12.345678" or "-0.5": at most six decimals,
// no rounding.
func ParseMoney(s string) (Money, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	s = strings.TrimPrefix(s, "$")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 6 {
		return 0, fmt.Errorf("%q is not an amount (want e.g. 12.50, at most 6 decimals)", s)
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseUint(whole, 10, 63)
	if err != nil || w > math.MaxInt64/1_000_000-1 {
		return 0, fmt.Errorf("%q is not an amount (want e.g. 12.50, at most 6 decimals)", s)
	}
	var f uint64
	if frac != "" {
		f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an amount (want e.g. 12.50, at most 6 decimals)", s)
		}
	}
	m := Money(w*1e6 + f)
	if neg {
		m = -m
	}
	return m, nil
}

// MarshalText writes the amount as a decimal without the dollar sign.
func (m Money) MarshalText() ([]byte, error) {
	return []byte(strings.Replace(m.String(), "$", "", 1)), nil
}

// UnmarshalText accepts what ParseMoney accepts.
func (m *Money) UnmarshalText(b []byte) error {
	v, err := ParseMoney(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

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
func Percent(amount Money, percent float64) Money {
	if amount <= 0 || percent <= 0 || math.IsNaN(percent) {
		return 0
	}
	bp := uint64(math.Round(percent * 100))
	return Money(mulDiv(uint64(amount), bp, 10_000))
}
