// Package forecast projects daily spend with a prediction interval.
//
// Method: additive Holt-Winters (ETS(A,A,A)) with weekly seasonality
// (m = 7) over a daily series, smoothing parameters chosen from a fixed
// grid by least one-step-ahead squared error. The prediction interval is
// mean ± z·σ_h, where σ is the standard deviation of the one-step
// residuals and σ_h² = σ²·(1 + Σ_{j=1}^{h-1} (α(1+jβ) + γ·[j mod 7 = 0])²),
// the ETS(A,A,A) variance formula (Hyndman & Athanasopoulos, FPP, §8.7).
//
// Short histories fall back: under 14 days (two seasons) the forecast is
// the series mean, flat, with an interval of ±z·max(σ, mean/2)·√h — wide
// on purpose — and Result.Method says "mean (short history)". With no
// complete day at all the caller measures a run rate (spend so far ÷
// time elapsed) and RunRate projects it flat with an interval of
// ±z·rate·√h ("run-rate"). Result.Method always names the model used.
// Pure: no clock, no randomness.
package forecast

import (
	"math"
)

// Season is the seasonal period in days.
const Season = 7

// MinHistory is the number of days Holt-Winters needs; below it the
// forecast falls back to the mean.
const MinHistory = 2 * Season

// Point is one forecast day.
type Point struct {
	// Day is the offset from the day after the series ends (0 = tomorrow).
	Day                int
	Mean, Lower, Upper float64
}

// Result is a forecast and how it was made.
type Result struct {
	Method string
	// Alpha, Beta, Gamma are the chosen smoothing parameters (Holt-Winters
	// only).
	Alpha, Beta, Gamma float64
	// Sigma is the one-step residual standard deviation.
	Sigma float64
	// Level is the interval's coverage, e.g. 0.95.
	Level  float64
	Points []Point
	// Note explains a fallback, for the user.
	Note string
}

// Options tune the forecast; the zero value means a 95% interval.
type Options struct {
	// Level is the interval coverage: 0.8, 0.9, 0.95 (default) or 0.99.
	Level float64
}

func z(level float64) (float64, float64) {
	switch {
	case level == 0:
		return 1.96, 0.95
	case level <= 0.8:
		return 1.2816, 0.8
	case level <= 0.9:
		return 1.6449, 0.9
	case level <= 0.95:
		return 1.96, 0.95
	}
	return 2.5758, 0.99
}

// Daily forecasts the next horizon days of series (oldest first; NaN
// treated as 0). Forecasts are clamped at 0 below: spend is never
// negative.
func Daily(series []float64, horizon int, o Options) Result {
	zz, lvl := z(o.Level)
	ys := make([]float64, len(series))
	for i, v := range series {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			ys[i] = v
		}
	}
	if len(ys) < MinHistory {
		return meanForecast(ys, horizon, zz, lvl)
	}
	best := fit{sse: math.Inf(1)}
	for _, a := range []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.7} {
		for _, b := range []float64{0, 0.01, 0.05, 0.1, 0.2} {
			for _, g := range []float64{0.01, 0.05, 0.1, 0.3} {
				if f := holtWinters(ys, a, b, g); f.sse < best.sse {
					best = f
				}
			}
		}
	}
	n := float64(len(ys) - Season)
	sigma := math.Sqrt(best.sse / math.Max(n-3, 1))
	r := Result{Method: "holt-winters additive, weekly seasonality", Alpha: best.a, Beta: best.b, Gamma: best.g,
		Sigma: sigma, Level: lvl}
	var cum float64
	for h := 1; h <= horizon; h++ {
		if h > 1 {
			j := float64(h - 1)
			c := best.a * (1 + j*best.b)
			if (h-1)%Season == 0 {
				c += best.g
			}
			cum += c * c
		}
		mean := best.level + float64(h)*best.trend + best.season[(len(ys)+h-1)%Season]
		sd := sigma * math.Sqrt(1+cum)
		r.Points = append(r.Points, point(h-1, mean, zz*sd))
	}
	return r
}

func point(day int, mean, half float64) Point {
	return Point{Day: day, Mean: math.Max(mean, 0), Lower: math.Max(mean-half, 0), Upper: math.Max(mean+half, 0)}
}

func meanForecast(ys []float64, horizon int, zz, lvl float64) Result {
	var sum float64
	for _, v := range ys {
		sum += v
	}
	mean := 0.0
	if len(ys) > 0 {
		mean = sum / float64(len(ys))
	}
	var ss float64
	for _, v := range ys {
		ss += (v - mean) * (v - mean)
	}
	sigma := 0.0
	if len(ys) > 1 {
		sigma = math.Sqrt(ss / float64(len(ys)-1))
	}
	sd := math.Max(sigma, mean/2)
	r := Result{Method: "mean (short history)", Sigma: sigma, Level: lvl,
		Note: "fewer than 14 days of history: flat mean forecast with a deliberately wide interval"}
	for h := 1; h <= horizon; h++ {
		r.Points = append(r.Points, point(h-1, mean, zz*sd*math.Sqrt(float64(h))))
	}
	return r
}

// Methods a Result can name besides Holt-Winters and the mean.
const (
	MethodRunRate = "run-rate (less than a day of history)"
	MethodNone    = "none (no spend yet)"
)

// RunRate forecasts horizon days at rate per day, measured over less than
// a day of spend (a new scope's first day): flat, with an interval of
// ±z·rate·√h — a 100% daily deviation, since one partial day says nothing
// about how spend varies. A zero rate is MethodNone: nothing to project.
func RunRate(rate float64, horizon int, o Options) Result {
	zz, lvl := z(o.Level)
	if !(rate > 0) || math.IsInf(rate, 0) {
		r := Result{Method: MethodNone, Level: lvl, Note: "no spend in scope yet: nothing to project"}
		for h := 1; h <= horizon; h++ {
			r.Points = append(r.Points, point(h-1, 0, 0))
		}
		return r
	}
	r := Result{Method: MethodRunRate, Sigma: rate, Level: lvl,
		Note: "less than a day of history: today's spend rate so far, projected flat, with a deliberately wide interval"}
	for h := 1; h <= horizon; h++ {
		r.Points = append(r.Points, point(h-1, rate, zz*rate*math.Sqrt(float64(h))))
	}
	return r
}

type fit struct {
	a, b, g      float64
	sse          float64
	level, trend float64
	season       [Season]float64
}

// holtWinters runs the component form over ys, initialised from the
// first two seasons, and returns the final state and the one-step SSE
// from the second season on. season[i] is the index for day i mod 7.
func holtWinters(ys []float64, a, b, g float64) fit {
	f := fit{a: a, b: b, g: g}
	var m1, m2 float64
	for i := 0; i < Season; i++ {
		m1 += ys[i]
		m2 += ys[Season+i]
	}
	m1 /= Season
	m2 /= Season
	f.level = m1
	f.trend = (m2 - m1) / Season
	for i := 0; i < Season; i++ {
		f.season[i] = (ys[i] - m1 + ys[Season+i] - m2) / 2
	}
	// Level at the end of the first season.
	f.level = m1 + f.trend*float64(Season-1)/2
	for t := Season; t < len(ys); t++ {
		s := f.season[t%Season]
		pred := f.level + f.trend + s
		e := ys[t] - pred
		f.sse += e * e
		prev := f.level
		f.level = a*(ys[t]-s) + (1-a)*(f.level+f.trend)
		f.trend = b*(f.level-prev) + (1-b)*f.trend
		f.season[t%Season] = g*(ys[t]-prev-f.trend) + (1-g)*s
	}
	return f
}

// Total sums the first n points (e.g. the rest of a budget period). The
// interval adds the per-day bounds, which is conservative (assumes the
// days' errors move together).
func (r Result) Total(n int) (mean, lower, upper float64) {
	for i := 0; i < n && i < len(r.Points); i++ {
		mean += r.Points[i].Mean
		lower += r.Points[i].Lower
		upper += r.Points[i].Upper
	}
	return mean, lower, upper
}
