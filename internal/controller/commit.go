package controller

import (
	"context"
	"sync"

	"github.com/gpufleet/gpufleet/internal/store"
)

// commit is one batch on its way to disk.
type commit struct {
	seq  uint64
	ch   <-chan error
	done chan struct{}
	err  error
}

// wait blocks until the batch is durable, or ctx ends.
func (c *commit) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// committer queues batches and acknowledges them in order, tracking the
// highest sequence known durable so readers can wait for a barrier.
type committer struct {
	st    store.Store
	queue chan *commit
	fatal func(error)

	// subMu orders submissions: the controller's and its components'
	// (identity, audit, vault), each of which submits under its own lock.
	subMu sync.Mutex
	next  uint64 // guarded by subMu

	mu       sync.Mutex
	durable  uint64
	advanced chan struct{}
}

func newCommitter(st store.Store, fatal func(error)) *committer {
	return &committer{st: st, queue: make(chan *commit, 1<<16), fatal: fatal, advanced: make(chan struct{})}
}

// submit queues b. Callers hold the lock of the state b records (the
// controller's mutex, or a component's), so within each the sequence
// numbers follow the order changes reached memory.
func (c *committer) submit(b *store.Batch) *commit {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.next++
	cm := &commit{seq: c.next, ch: c.st.Submit(b), done: make(chan struct{})}
	c.queue <- cm
	return cm
}

// last is the sequence number of the latest batch submitted, for barrier.
func (c *committer) last() uint64 {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.next
}

// Commit is submit for the components that share the committer; it makes
// the committer a store.Committer.
func (c *committer) Commit(b *store.Batch) func(context.Context) error {
	return c.submit(b).wait
}

// run acknowledges commits in order until ctx ends and the queue drains.
func (c *committer) run(ctx context.Context) {
	for {
		select {
		case cm := <-c.queue:
			c.ack(cm)
		case <-ctx.Done():
			for {
				select {
				case cm := <-c.queue:
					c.ack(cm)
				default:
					return
				}
			}
		}
	}
}

func (c *committer) ack(cm *commit) {
	cm.err = <-cm.ch
	close(cm.done)
	if cm.err != nil {
		c.fatal(cm.err)
		return
	}
	c.mu.Lock()
	c.durable = cm.seq
	close(c.advanced)
	c.advanced = make(chan struct{})
	c.mu.Unlock()
}

// barrier waits until every batch up to seq is durable.
func (c *committer) barrier(ctx context.Context, seq uint64) error {
	for {
		c.mu.Lock()
		d, ch := c.durable, c.advanced
		c.mu.Unlock()
		if d >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
