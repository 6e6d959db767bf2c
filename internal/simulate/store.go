package simulate

import (
	"context"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// memStore is the store.Store of a simulated run: nothing is read back
// (a run starts from nothing and never restarts), so it keeps no jobs,
// attempts or nodes, only what the report reads of the ledger: its total,
// by capacity type, and per hour by capacity type. Every batch is durable
// at once. Its mutex guards everything.
type memStore struct {
	mu     sync.Mutex
	total  model.Money
	byCap  map[model.CapacityType]model.Money
	hourly map[time.Time]map[model.CapacityType]model.Money // by the hour an entry starts in
	// gpuHours are the allocation entries' GPU-hours by GPU model and
	// hour, all and on spot (the purchase-mix recommendation's input).
	gpuHours, spotHours map[string]map[time.Time]float64
	// metered are GPU-seconds per hour: allocated, and allocated plus
	// idle (every GPU the ledger metered).
	metered map[time.Time]*[2]float64
	rows    int
	done    chan error
}

func newMemStore() *memStore {
	done := make(chan error)
	close(done)
	return &memStore{byCap: map[model.CapacityType]model.Money{}, hourly: map[time.Time]map[model.CapacityType]model.Money{},
		gpuHours: map[string]map[time.Time]float64{}, spotHours: map[string]map[time.Time]float64{},
		metered: map[time.Time]*[2]float64{}, done: done}
}

// Load returns an empty dump: a simulation starts from nothing.
func (m *memStore) Load(context.Context) (*store.Dump, error) { return &store.Dump{}, nil }

func (m *memStore) Submit(b *store.Batch) <-chan error {
	if len(b.Ledger) == 0 {
		return m.done
	}
	m.mu.Lock()
	for _, e := range b.Ledger {
		m.total += e.Cost
		m.byCap[e.CapacityType] += e.Cost
		h := e.From.Truncate(time.Hour)
		if m.hourly[h] == nil {
			m.hourly[h] = map[model.CapacityType]model.Money{}
		}
		m.hourly[h][e.CapacityType] += e.Cost
		if m.metered[h] == nil {
			m.metered[h] = &[2]float64{}
		}
		if e.Kind == model.LedgerAllocation {
			m.metered[h][0] += e.GPUSeconds
		}
		m.metered[h][1] += e.GPUSeconds
		if e.Kind == model.LedgerAllocation && e.GPUModel != "" {
			add(m.gpuHours, e.GPUModel, h, e.GPUSeconds/3600)
			if e.CapacityType == model.Spot {
				add(m.spotHours, e.GPUModel, h, e.GPUSeconds/3600)
			}
		}
		m.rows++
	}
	m.mu.Unlock()
	return m.done
}

func (m *memStore) Close() error { return nil }

func add(m map[string]map[time.Time]float64, k string, h time.Time, v float64) {
	if m[k] == nil {
		m[k] = map[time.Time]float64{}
	}
	m[k][h] += v
}
