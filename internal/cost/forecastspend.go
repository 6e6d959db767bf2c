package cost

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/cost/forecast"
)

// ForecastSpend computes a budget's Spend at now from the rollup: Actual
// is allocation spend since the period start; Forecast adds the forecast
// mean for the rest of the period, from history days of daily spend
// before today (Holt-Winters, or the mean on short histories; see
// package forecast). Today counts as a whole forecast day less what it
// has already spent. The forecast is returned for reports (intervals,
// method, later periods via a longer horizon).
func ForecastSpend(r *Rollup, b Budget, now time.Time, history, extraDays int) (Spend, forecast.Result) {
	start, end := b.Period.Bounds(now)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	actual := r.Spend(b.Scope, start, now)
	hist := r.DailySpend(b.Scope, today.AddDate(0, 0, -history), history)
	series := make([]float64, len(hist))
	for i, m := range hist {
		series[i] = m.Dollars()
	}
	left := int(end.Sub(today).Hours()+23) / 24
	f := forecast.Daily(series, left+extraDays, forecast.Options{})
	mean, _, _ := f.Total(left)
	rest := FromDollars(mean) - r.Spend(b.Scope, today, now)
	return Spend{Actual: actual, Forecast: actual + max(rest, 0)}, f
}
