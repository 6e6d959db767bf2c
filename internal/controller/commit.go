package controller

import (
	"context"
	"sync"

	"github.com/gpufleet/gpufleet/internal/store"
)

// commit is one batch on its way to disk.
type commit struct {
	seq uint64
	// submit queues the batch, encoded (store.Prepare); nil while its
	// place is reserved and the batch not yet given.
	submit func() <-chan error
	// queued is closed once ch is set: the batch reached the store.
	queued chan struct{}
	ch     <-chan error
	done   chan struct{}
	err    error
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
//
// A batch is encoded before it takes its place (store.Prepare), outside
// subMu, so the one lock every component's submission passes holds only
// the numbering and the hand-over; a caller can also reserve its place
// under its own lock and give the batch after releasing it (reserve),
// keeping the encoding out of that lock too. Batches reach the store in
// sequence order: one whose place is reserved holds back every later one
// until it is given.
type committer struct {
	st    store.Store
	queue chan *commit
	fatal func(error)

	// subMu orders submissions: the controller's and its components'
	// (identity, audit, vault), each of which submits under its own lock.
	// It is held while a new place is sent to run, which can wait for
	// room in the queue; fill therefore never takes it (heldMu instead),
	// or a full queue behind an unfilled place would never drain.
	subMu sync.Mutex
	next  uint64 // guarded by subMu

	heldMu sync.Mutex
	held   []*commit // numbered, not yet queued to the store, in order; guarded by heldMu

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
	submit := store.Prepare(c.st, b)
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.placeLocked(submit)
}

// reserve numbers a batch that is given later, by fill: callers reserve
// under the lock that orders their change and fill after releasing it.
// Until it is filled no later batch reaches the store, so every reserve
// must be followed by one fill, without waiting on anything in between.
func (c *committer) reserve() *commit {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.placeLocked(nil)
}

// fill gives a reserved place its batch, encoding it on the caller's
// goroutine, and queues it with any later batches it held back.
func (c *committer) fill(cm *commit, b *store.Batch) {
	submit := store.Prepare(c.st, b)
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	cm.submit = submit
	c.releaseLocked()
}

// placeLocked numbers a new commit with its batch (submit; nil for a
// reserved place), queues what it can to the store and sends the commit to
// run for acknowledgement. The send may wait for room in the queue, with
// subMu held but not heldMu, so a fill can always release the place run is
// waiting on.
func (c *committer) placeLocked(submit func() <-chan error) *commit {
	c.next++
	cm := &commit{seq: c.next, submit: submit, queued: make(chan struct{}), done: make(chan struct{})}
	c.heldMu.Lock()
	c.held = append(c.held, cm)
	if submit != nil {
		c.releaseLocked()
	}
	c.heldMu.Unlock()
	c.queue <- cm
	return cm
}

// releaseLocked (heldMu held) queues to the store, in order, every held
// batch up to the first place still waiting for its batch.
func (c *committer) releaseLocked() {
	n := 0
	for _, cm := range c.held {
		if cm.submit == nil {
			break
		}
		cm.ch = cm.submit()
		close(cm.queued)
		n++
	}
	if n > 0 {
		c.held = append(c.held[:0], c.held[n:]...)
	}
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

// Reserve is reserve and fill for the components that share the
// committer; it makes the committer a store.Reserver.
func (c *committer) Reserve() func(*store.Batch) func(context.Context) error {
	cm := c.reserve()
	return func(b *store.Batch) func(context.Context) error {
		c.fill(cm, b)
		return cm.wait
	}
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
	<-cm.queued
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
