// Package other holds wrappers that checkWrappers must flag (all but good).
package other

import "github.com/gpufleet/gpufleet/internal/store"

// methodValue forwards through a method value.
type methodValue struct{ inner store.Store }

func (s *methodValue) Submit(b *store.Batch) <-chan error {
	f := s.inner.Submit
	return f(b)
}

// viaHelper forwards through a helper.
type viaHelper struct{ inner store.Store }

func (s *viaHelper) Submit(b *store.Batch) <-chan error { return s.send(b) }

func (s *viaHelper) send(b *store.Batch) <-chan error { return store.Prepare(s.inner, b)() }

// concreteStore is a store of its own.
type concreteStore struct{}

func (concreteStore) Submit(*store.Batch) <-chan error { return nil }

// concrete holds a concrete store and forwards through a helper.
type concrete struct{ db *concreteStore }

func (c concrete) Submit(b *store.Batch) <-chan error { return c.put(b) }

func (c concrete) put(b *store.Batch) <-chan error { return c.db.Submit(b) }

// good forwards through a helper and declares Prepare.
type good struct{ inner store.Store }

func (g good) Submit(b *store.Batch) <-chan error { return g.send(b) }

func (g good) send(b *store.Batch) <-chan error { return g.inner.Submit(b) }

func (g good) Prepare(b *store.Batch) func() <-chan error { return store.Prepare(g.inner, b) }
