package testutil

import (
	"context"
	"sync"

	"github.com/gpufleet/gpufleet/internal/store"
)

// Committer is a store.Committer for a component's tests: it records every
// batch in the order committed, and makes each durable at once, or, while
// Hold is in force, only at Release, so a test can see that a method waits.
type Committer struct {
	mu      sync.Mutex
	batches []*store.Batch
	gate    chan struct{} // nil: durable at once
}

// Commit records b.
func (c *Committer) Commit(b *store.Batch) func(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, b)
	gate := c.gate
	return func(ctx context.Context) error {
		if gate == nil {
			return nil
		}
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Hold makes batches committed from now on wait for Release.
func (c *Committer) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = make(chan struct{})
}

// Release makes the held batches durable, and later ones at once.
func (c *Committer) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

// Batches returns the batches committed so far, in order.
func (c *Committer) Batches() []*store.Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*store.Batch(nil), c.batches...)
}
