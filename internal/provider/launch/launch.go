// Package launch runs provider launches off the scheduling and scaling
// goroutines (DESIGN.md §4: scheduling never waits on a cloud). A Queue
// takes launch requests without blocking and runs each on its own
// goroutine, at most PerProvider at once per driver and PerRegion at once
// per driver and region, each under a deadline; a transient error
// (provider.IsTransient) is retried with doubling back-off inside that
// deadline. Every other outcome — an instance, insufficient capacity, a
// quota, an unknown offer, the deadline — is handed to the request's Done,
// which decides what it means (the controller marks offers unavailable and
// fails over).
//
// Time comes from a clock.Clock, so tests drive back-off and deadlines
// with a fake clock.
package launch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/provider"
)

// Defaults for Options' zero values.
const (
	DefaultPerProvider = 8
	DefaultPerRegion   = 4
	DefaultDeadline    = 5 * time.Minute
	DefaultBackoff     = time.Second
	MaxBackoff         = time.Minute
)

// ErrDeadline: the launch did not finish within its deadline (the last
// transient error, if any, is joined to it).
var ErrDeadline = errors.New("launch deadline passed")

// Options configure a Queue; zero values take the defaults.
type Options struct {
	Clock clock.Clock
	// PerProvider bounds concurrent launches per driver (by Name),
	// PerRegion per driver and region.
	PerProvider, PerRegion int
	// Deadline bounds one launch, retries included.
	Deadline time.Duration
	// Backoff is the first wait before retrying a transient error; it
	// doubles up to MaxBackoff.
	Backoff time.Duration
}

// Request is one launch.
type Request struct {
	Provider provider.Provider
	Launch   provider.LaunchRequest
	// Done receives the outcome, once, on the launch's goroutine. It is
	// called with ctx's error when the queue's context ends first.
	Done func(provider.Instance, error)
}

// Queue runs launches with bounded concurrency. Safe for concurrent use;
// its mutex guards the semaphores and the in-flight count.
type Queue struct {
	opts Options

	mu       sync.Mutex
	sems     map[string]chan struct{} // "p/"+provider, "r/"+provider+"/"+region
	inflight int
	wg       sync.WaitGroup
}

// New returns an empty queue.
func New(opts Options) *Queue {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.PerProvider <= 0 {
		opts.PerProvider = DefaultPerProvider
	}
	if opts.PerRegion <= 0 {
		opts.PerRegion = DefaultPerRegion
	}
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	return &Queue{opts: opts, sems: map[string]chan struct{}{}}
}

// Submit queues r and returns at once. The launch runs under ctx (the
// server's): ending it abandons waiting and running launches.
func (q *Queue) Submit(ctx context.Context, r Request) {
	q.mu.Lock()
	q.inflight++
	q.mu.Unlock()
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		in, err := q.run(ctx, r)
		q.mu.Lock()
		q.inflight--
		q.mu.Unlock()
		r.Done(in, err)
	}()
}

// InFlight is the number of launches submitted and not yet done.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// Wait returns once every submitted launch is done.
func (q *Queue) Wait() { q.wg.Wait() }

func (q *Queue) sem(key string, n int) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.sems[key]
	if !ok {
		s = make(chan struct{}, n)
		q.sems[key] = s
	}
	return s
}

// run waits for both slots, then launches until success, a non-transient
// error or the deadline. The deadline counts from the submission: time
// spent waiting for a slot is part of it.
func (q *Queue) run(ctx context.Context, r Request) (provider.Instance, error) {
	name, region := r.Provider.Name(), r.Launch.Offer.Region
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	expired := q.opts.Clock.After(q.opts.Deadline)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-expired:
			cancel(ErrDeadline)
		case <-stop:
		}
	}()
	for _, s := range []chan struct{}{q.sem("p/"+name, q.opts.PerProvider), q.sem("r/"+name+"/"+region, q.opts.PerRegion)} {
		select {
		case s <- struct{}{}:
			defer func() { <-s }()
		case <-ctx.Done():
			return provider.Instance{}, fmt.Errorf("waiting to launch %s in %s %s: %w", r.Launch.Offer.InstanceType, name, region, context.Cause(ctx))
		}
	}
	wait := q.opts.Backoff
	for {
		in, err := r.Provider.Launch(ctx, r.Launch)
		if err == nil || !provider.IsTransient(err) {
			if err != nil && ctx.Err() != nil {
				err = errors.Join(err, context.Cause(ctx))
			}
			return in, err
		}
		select {
		case <-q.opts.Clock.After(wait):
			wait = min(wait*2, MaxBackoff)
		case <-ctx.Done():
			return provider.Instance{}, errors.Join(err, context.Cause(ctx))
		}
	}
}
