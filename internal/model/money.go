package model

import (
	"fmt"
	"math"
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
