package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bytes is an amount of memory in bytes. It is written and read as a
// Kubernetes-style quantity: "40Gi", "512Mi", "1.5Ti", "80G", or a plain
// integer number of bytes.
type Bytes int64

// Common sizes.
const (
	KiB Bytes = 1 << 10
	MiB Bytes = 1 << 20
	GiB Bytes = 1 << 30
	TiB Bytes = 1 << 40
)

var byteSuffixes = []struct {
	suffix string
	mult   float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// ParseBytes parses a quantity such as "40Gi" or "80G".
func ParseBytes(s string) (Bytes, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty quantity")
	}
	num, mult := s, 1.0
	for _, sf := range byteSuffixes {
		if strings.HasSuffix(s, sf.suffix) {
			num, mult = strings.TrimSuffix(s, sf.suffix), sf.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a quantity (want a number with an optional suffix Ki, Mi, Gi, Ti, k, M, G, T)", s)
	}
	v := f * mult
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Bytes(math.Round(v)), nil
}

// String writes b in the largest binary unit that divides it exactly.
func (b Bytes) String() string {
	for _, u := range []struct {
		s string
		v Bytes
	}{{"Ti", TiB}, {"Gi", GiB}, {"Mi", MiB}, {"Ki", KiB}} {
		if b != 0 && b%u.v == 0 {
			return strconv.FormatInt(int64(b/u.v), 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// GiB returns b in gibibytes.
func (b Bytes) GiB() float64 { return float64(b) / float64(GiB) }

// MarshalText writes the quantity as String does; encoding/json quotes it.
// (A text marshaler rather than a JSON one: encoding/json then skips
// re-validating the output, which store rows and API answers pay for.)
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalJSON accepts a quantity string or a plain number of bytes.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	s, ok := plainJSONString(data)
	if !ok {
		if err := json.Unmarshal(data, &s); err != nil {
			var n json.Number
			if err2 := json.Unmarshal(data, &n); err2 != nil {
				return fmt.Errorf("want a quantity such as \"40Gi\"")
			}
			s = n.String()
		}
	}
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration written as "30m", "2h30m" or "3d".
type Duration time.Duration

// ParseDuration parses Go duration syntax plus a whole-day suffix "d".
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, "d") {
		n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
		if err != nil || n < 0 || n > 100000 {
			return 0, fmt.Errorf("%q is not a duration (want e.g. 90s, 30m, 12h, 7d)", s)
		}
		return Duration(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want e.g. 90s, 30m, 12h, 7d)", s)
	}
	return Duration(d), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as String does; encoding/json quotes it
// (see Bytes.MarshalText).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(data []byte) error {
	s, ok := plainJSONString(data)
	if !ok {
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("want a duration string such as \"30m\"")
		}
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// plainJSONString returns the string the JSON value data holds when data is
// a string of printable ASCII without escapes, which is the string as
// written; ok is false for any other value, which json.Unmarshal must read.
func plainJSONString(data []byte) (s string, ok bool) {
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return "", false
	}
	inner := data[1 : len(data)-1]
	for _, c := range inner {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(inner), true
}

// Human writes b rounded to one decimal for people: "23.5Gi", "512Mi", "80Gi".
func (b Bytes) Human() string {
	for _, u := range []struct {
		s string
		v Bytes
	}{{"Ti", TiB}, {"Gi", GiB}, {"Mi", MiB}, {"Ki", KiB}} {
		if b >= u.v {
			return strings.TrimSuffix(strconv.FormatFloat(float64(b)/float64(u.v), 'f', 1, 64), ".0") + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
