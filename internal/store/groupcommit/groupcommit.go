// Package groupcommit is the committer every store backend shares: callers
// queue encoded batches and return at once; one goroutine takes whatever is
// queued (up to a bound) and hands it to the backend's write function as
// one group, so concurrent callers share one transaction and one sync.
//
// A backend that can have several transactions in flight (PostgreSQL, on
// several connections) starts the committer with StartPipelined: the next
// group is formed and sent while the previous one's commit (its WAL flush)
// is still running, and the backend keeps the groups' commits in order.
//
// Invariants:
//   - Groups are sent in Submit order, at most Depth at a time (one with
//     Start); batches submitted while a group is sent form the next group.
//   - Groups are finished in the order they were sent: a group's finish
//     runs only after the previous group's finish returned.
//   - A batch's channel yields only after its group's finish returned: nil
//     when the write reported it durable, its own error, or the group's.
//   - The observer sees a commit before any of its batches is acknowledged.
//   - After Close, Submit fails with store.ErrClosed and Close returns once
//     everything submitted before it was written (or failed).
package groupcommit

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
)

// DefaultMaxBatch is the most batches one group takes when Options.MaxBatch
// is zero. It bounds how long the first caller of a group waits behind the
// others and how much one transaction holds in memory.
const DefaultMaxBatch = 4096

// Options tune a Committer. The zero value means defaults.
type Options struct {
	// MaxBatch is the most batches grouped into one write; 0 or less
	// means DefaultMaxBatch.
	MaxBatch int
	// Logger receives commit failures; nil discards them.
	Logger *slog.Logger
	// Depth is how many groups StartPipelined keeps in flight at once; 0
	// or less means 1. Start ignores it.
	Depth int
	// Observer, if set, is called after every successful write with its
	// latency and the number of batches it held. It runs on the committer
	// goroutine before the group's channels are completed, so it must
	// return quickly.
	Observer func(d time.Duration, batches int)
}

// Stats are cumulative counters of a Committer.
type Stats struct {
	// Commits counts groups written.
	Commits uint64
	// Failures counts writes that failed as a whole, failing every batch
	// in them.
	Failures uint64
	// Batches and Rows count the batches made durable and the rows they
	// held (as the size function counts them).
	Batches uint64
	Rows    uint64
	// LastCommit is the latency of the latest successful write.
	LastCommit time.Duration
}

// WriteFunc writes one group in one transaction and returns each batch's
// own error; err set means the whole group failed and none of it is
// durable. It runs on the committer goroutine only.
type WriteFunc[T any] func(group []T) (errs []error, err error)

// SendFunc starts writing one group and returns once the next group may be
// sent; finish waits for the group's outcome, as a WriteFunc returns it.
// Send runs on the committer's sending goroutine, finish on its finishing
// goroutine, each group's finish after the previous group's finish
// returned, so a backend that keeps commits in order can correct a group
// sent on an expectation that failed (its predecessor's commit) there.
type SendFunc[T any] func(group []T) (finish func() (errs []error, err error))

// Committer queues batches of type T and writes them in groups.
type Committer[T any] struct {
	send     SendFunc[T]
	size     func(T) int
	log      *slog.Logger
	observe  func(time.Duration, int)
	maxBatch int
	// flight holds the groups sent and not yet finished, in order; its
	// capacity is the depth.
	flight chan sent[T]

	mu     sync.Mutex
	wake   *sync.Cond // signalled when queue grows or closed is set
	queue  []pending[T]
	closed bool
	stats  Stats

	// slot holds a token per group being formed or in flight, so at most
	// depth exist at once.
	slot      chan struct{}
	stopped   chan struct{} // closed when the committer returns
	closeOnce sync.Once
}

type pending[T any] struct {
	item T
	done chan error
}

// sent is a group in flight.
type sent[T any] struct {
	group  []pending[T]
	finish func() ([]error, error)
	begin  time.Time
}

// Start starts a committer that writes one group at a time. size counts an
// item's rows for Stats.
func Start[T any](write WriteFunc[T], size func(T) int, opts Options) *Committer[T] {
	opts.Depth = 1
	return StartPipelined(func(group []T) func() ([]error, error) {
		errs, err := write(group)
		return func() ([]error, error) { return errs, err }
	}, size, opts)
}

// StartPipelined starts a committer that keeps up to opts.Depth groups in
// flight, sent by send. size counts an item's rows for Stats.
func StartPipelined[T any](send SendFunc[T], size func(T) int, opts Options) *Committer[T] {
	c := &Committer[T]{send: send, size: size, log: opts.Logger, observe: opts.Observer, maxBatch: opts.MaxBatch, stopped: make(chan struct{})}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.maxBatch <= 0 {
		c.maxBatch = DefaultMaxBatch
	}
	c.flight = make(chan sent[T], max(opts.Depth, 1))
	c.slot = make(chan struct{}, max(opts.Depth, 1))
	c.wake = sync.NewCond(&c.mu)
	go c.run()
	go c.finishing()
	return c
}

// Submit queues item and returns at once. The channel is buffered, so a
// caller that stops waiting leaks nothing; it yields store.ErrClosed after
// Close.
func (c *Committer[T]) Submit(item T) <-chan error {
	done := make(chan error, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Failed(store.ErrClosed)
	}
	c.queue = append(c.queue, pending[T]{item: item, done: done})
	c.mu.Unlock()
	c.wake.Signal()
	return done
}

// Failed returns a closed channel that yields err: a batch refused before
// it was queued.
func Failed(err error) <-chan error {
	done := make(chan error, 1)
	done <- err
	close(done)
	return done
}

// Close stops accepting batches and waits until every batch already
// submitted is written or has failed. It is safe to call more than once.
func (c *Committer[T]) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.wake.Signal()
		<-c.stopped
	})
}

// Stats returns the counters so far.
func (c *Committer[T]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// run forms and sends groups. A send on the full flight channel waits for
// the oldest group in flight to finish, which bounds the depth; with depth
// one the next group is formed only after the previous one finished.
func (c *Committer[T]) run() {
	defer close(c.flight)
	for {
		c.slot <- struct{}{}
		group := c.next()
		if len(group) == 0 {
			return
		}
		items := make([]T, len(group))
		for i, p := range group {
			items[i] = p.item
		}
		begin := time.Now()
		c.flight <- sent[T]{group: group, finish: c.send(items), begin: begin}
	}
}

// finishing finishes the groups in flight in the order they were sent.
func (c *Committer[T]) finishing() {
	defer close(c.stopped)
	for s := range c.flight {
		c.commit(s)
		<-c.slot
	}
}

// next waits for queued batches and takes up to maxBatch of them, oldest
// first. It returns nothing once closed and drained.
func (c *Committer[T]) next() []pending[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) == 0 && !c.closed {
		c.wake.Wait()
	}
	group := c.queue
	if len(group) > c.maxBatch {
		group, c.queue = group[:c.maxBatch:c.maxBatch], group[c.maxBatch:]
	} else {
		c.queue = nil
	}
	return group
}

// commit finishes a group sent, then reports to the stats, the observer and
// every waiter, in that order, so whoever sees its batch acknowledged also
// sees it counted.
func (c *Committer[T]) commit(s sent[T]) {
	group := s.group
	errs, err := s.finish()
	took := time.Since(s.begin)
	if err == nil && len(errs) != len(group) {
		err = fmt.Errorf("the store returned %d results for %d batches", len(errs), len(group))
	}

	c.mu.Lock()
	if err != nil {
		c.stats.Failures++
	} else {
		c.stats.Commits++
		c.stats.LastCommit = took
		for i, p := range group {
			if errs[i] == nil {
				c.stats.Batches++
				c.stats.Rows += uint64(c.size(p.item))
			}
		}
	}
	c.mu.Unlock()

	if err != nil {
		c.log.Error("commit failed", "batches", len(group), "err", err)
	} else if c.observe != nil {
		c.observe(took, len(group))
	}
	for i, p := range group {
		if err != nil {
			p.done <- err
		} else {
			p.done <- errs[i]
		}
		close(p.done)
	}
}
