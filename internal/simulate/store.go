package simulate

import (
	"context"
	"sync"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// memStore is an in-memory store.Store for a simulated run: it keeps the
// newest version of every job, attempt and node and the whole ledger, and
// makes every batch durable at once. Its mutex guards everything.
type memStore struct {
	mu       sync.Mutex
	jobs     map[string]*model.Job
	attempts map[string]*model.Attempt
	nodes    map[string]*model.Node
	ledger   []model.LedgerEntry
}

func newMemStore() *memStore {
	return &memStore{jobs: map[string]*model.Job{}, attempts: map[string]*model.Attempt{}, nodes: map[string]*model.Node{}}
}

// Load returns an empty dump: a simulation starts from nothing.
func (m *memStore) Load(context.Context) (*store.Dump, error) { return &store.Dump{}, nil }

func (m *memStore) Submit(b *store.Batch) <-chan error {
	m.mu.Lock()
	for _, j := range b.Jobs {
		if old, ok := m.jobs[j.ID]; !ok || old.Version <= j.Version {
			m.jobs[j.ID] = j
		}
	}
	for _, a := range b.Attempts {
		if old, ok := m.attempts[a.ID]; !ok || old.Version <= a.Version {
			m.attempts[a.ID] = a
		}
	}
	for _, n := range b.Nodes {
		if old, ok := m.nodes[n.ID]; !ok || old.Version <= n.Version {
			m.nodes[n.ID] = n
		}
	}
	m.ledger = append(m.ledger, b.Ledger...)
	m.mu.Unlock()
	ch := make(chan error, 1)
	ch <- nil
	close(ch)
	return ch
}

func (m *memStore) Close() error { return nil }

// Ledger returns a copy of every ledger entry written.
func (m *memStore) Ledger() []model.LedgerEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]model.LedgerEntry(nil), m.ledger...)
}
