package cost

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/cost/forecast"
	"github.com/gpufleet/gpufleet/internal/model"
)

// ForecastSpend computes a budget's Spend at now from the rollup: Actual
// is allocation spend since the period start; Forecast adds the forecast
// mean for the rest of the period. The forecast reads the daily spend of
// up to history days before today, from the first day the scope spent
// anything (days before it are no history, and zeros would forecast
// nothing): Holt-Winters, or the mean on short histories (see package
// forecast); today counts as a whole forecast day less what it has
// already spent. With no complete day of spend (a scope's first day) it
// is the run rate of today's spend so far (spend ÷ time since the first
// hour that spent), projected to the period end with a wide interval. The
// forecast is returned for reports (intervals, method, later periods via
// a longer horizon).
func ForecastSpend(r *Rollup, b model.Budget, now time.Time, history, extraDays int) (Spend, forecast.Result) {
	start, end := b.Period.Bounds(now)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	actual := r.Spend(b.Scope, start, now)
	spentToday := r.Spend(b.Scope, today, now)
	left := int(end.Sub(today).Hours()+23) / 24
	hist := r.DailySpend(b.Scope, today.AddDate(0, 0, -history), history)
	for len(hist) > 0 && hist[0] == 0 {
		hist = hist[1:]
	}
	if len(hist) > 0 {
		series := make([]float64, len(hist))
		for i, m := range hist {
			series[i] = m.Dollars()
		}
		f := forecast.Daily(series, left+extraDays, forecast.Options{})
		mean, _, _ := f.Total(left)
		rest := model.FromDollars(mean) - spentToday
		return Spend{Actual: actual, Forecast: actual + max(rest, 0)}, f
	}
	var rate float64 // dollars per day
	if since, ok := r.firstSpend(b.Scope, today, now); ok && now.After(since) {
		rate = spentToday.Dollars() / now.Sub(since).Hours() * 24
	}
	f := forecast.RunRate(rate, left+extraDays, forecast.Options{})
	rest := model.FromDollars(rate * end.Sub(now).Hours() / 24)
	return Spend{Actual: actual, Forecast: actual + max(rest, 0)}, f
}

// firstSpend is the start of the first hour in [from, to) in which work
// in scope spent anything.
func (r *Rollup) firstSpend(s model.BudgetScope, from, to time.Time) (time.Time, bool) {
	for h := floorDiv(from.Unix(), 3600); h*3600 < to.Unix(); h++ {
		b := r.hours[h]
		if b == nil {
			continue
		}
		for j, id := range b.dims {
			if d := &r.dims[id]; d.Kind == model.LedgerAllocation && b.cells[j].Cost > 0 && s.Matches(d.Project, d.Queue, d.Tags) {
				return time.Unix(h*3600, 0).UTC(), true
			}
		}
	}
	return time.Time{}, false
}
