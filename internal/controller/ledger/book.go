package ledger

import (
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/cost"
	"github.com/gpufleet/gpufleet/internal/cost/forecast"
	"github.com/gpufleet/gpufleet/internal/model"
)

// Book holds the ledger's views. Its methods are safe for concurrent use.
type Book struct {
	mu     sync.Mutex
	rollup *cost.Rollup
	totals map[Key]model.Money
	idle   model.Money
}

// Key groups the totals.
type Key struct{ Project, Queue, Capacity string }

// New returns a book of the stored ledger entries.
func New(entries []model.LedgerEntry) *Book {
	b := &Book{rollup: cost.NewRollup(), totals: map[Key]model.Money{}}
	b.addLocked(entries)
	return b
}

// Add takes a metering pass's entries. The caller commits them.
func (b *Book) Add(entries []model.LedgerEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(entries)
}

func (b *Book) addLocked(entries []model.LedgerEntry) {
	b.rollup.Add(entries)
	for i := range entries {
		e := &entries[i]
		if e.Kind == model.LedgerIdle {
			b.idle += e.Cost
			continue
		}
		b.totals[Key{e.Project, e.Queue, string(e.CapacityType)}] += e.Cost
	}
}

// Report answers a report query from the rollups.
func (b *Book) Report(q cost.Query) (cost.Report, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rollup.Report(q)
}

// Job is a job's cost across all its attempts; false before its first
// metered second.
func (b *Book) Job(id string) (cost.JobCost, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rollup.Job(id)
}

// Forecast is a budget's spend this period and its forecast
// (cost.ForecastSpend over history days).
func (b *Book) Forecast(bu model.Budget, now time.Time, history int) (cost.Spend, forecast.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return cost.ForecastSpend(b.rollup, bu, now, history, 0)
}

// Totals returns the money metered so far by project, queue and capacity
// type, and the idle total.
func (b *Book) Totals() (map[Key]model.Money, model.Money) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[Key]model.Money, len(b.totals))
	for k, v := range b.totals {
		out[k] = v
	}
	return out, b.idle
}
