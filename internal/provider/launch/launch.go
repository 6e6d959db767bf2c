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
	// Before, when set, runs first, before the launch takes a slot (the
	// controller waits there for its node record to be durable); its
	// error ends the launch with that error.
	Before func(ctx context.Context) error
	// Done receives the outcome, once, on the launch's goroutine. It is
	// called with ctx's error when the queue's context ends first.
	Done func(provider.Instance, error)
}

// Queue runs launches with bounded concurrency, starting them in
// submission order (a launch whose provider or region is at its bound is
// passed over, not waited for), so with bounds of 1 launches run one after
// another in a deterministic order, as a simulation needs. A launch holds
// its slots until its Done has returned. Safe for concurrent use; its
// mutex guards the waiting list and the running counts.
type Queue struct {
	opts Options

	mu      sync.Mutex
	waiting []*job
	running map[string]int // "p/"+provider, "r/"+provider+"/"+region
	total   int            // submitted, not done
	wg      sync.WaitGroup
}

type job struct {
	r        Request
	pk, rk   string
	start    chan struct{} // closed when the job may call the provider
	ready    bool          // Before has returned
	started  bool
	abandons bool // gave up waiting (deadline, ctx): skip it
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
	return &Queue{opts: opts, running: map[string]int{}}
}

// Submit queues r and returns at once. The launch runs under ctx (the
// server's): ending it abandons waiting and running launches. The
// deadline counts from here: time spent waiting for a slot is part of it.
func (q *Queue) Submit(ctx context.Context, r Request) {
	name := r.Provider.Name()
	j := &job{r: r, pk: "p/" + name, rk: "r/" + name + "/" + r.Launch.Offer.Region, start: make(chan struct{})}
	q.mu.Lock()
	q.total++
	q.waiting = append(q.waiting, j)
	q.mu.Unlock()
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		in, err := q.run(ctx, j)
		r.Done(in, err)
		q.mu.Lock()
		q.total--
		if j.started {
			q.running[j.pk]--
			q.running[j.rk]--
		}
		q.dispatchLocked()
		q.mu.Unlock()
	}()
}

// dispatchLocked starts, in submission order, every waiting job whose
// provider and region are below their bounds. A job whose Before has not
// returned yet holds back the jobs after it (briefly: Before waits for a
// local commit), so the order never depends on goroutine scheduling.
// Callers hold q.mu.
func (q *Queue) dispatchLocked() {
	kept := q.waiting[:0]
	for i, j := range q.waiting {
		switch {
		case !j.ready && !j.abandons:
			kept = append(kept, q.waiting[i:]...)
			clear(q.waiting[len(kept):])
			q.waiting = kept
			return
		case j.abandons:
		case q.running[j.pk] < q.opts.PerProvider && q.running[j.rk] < q.opts.PerRegion:
			q.running[j.pk]++
			q.running[j.rk]++
			j.started = true
			close(j.start)
		default:
			kept = append(kept, j)
		}
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
}

// InFlight is the number of launches submitted and not yet done.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}

// Wait returns once every submitted launch is done.
func (q *Queue) Wait() { q.wg.Wait() }

// run waits for its turn, then launches until success, a non-transient
// error or the deadline.
func (q *Queue) run(ctx context.Context, j *job) (provider.Instance, error) {
	r := j.r
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
	if r.Before != nil {
		if err := r.Before(ctx); err != nil {
			q.mu.Lock()
			j.abandons = true
			q.mu.Unlock()
			return provider.Instance{}, fmt.Errorf("before launching %s in %s %s: %w", r.Launch.Offer.InstanceType, name, region, err)
		}
	}
	q.mu.Lock()
	j.ready = true
	q.dispatchLocked()
	q.mu.Unlock()
	select {
	case <-j.start:
	case <-ctx.Done():
		q.mu.Lock()
		j.abandons = !j.started
		q.mu.Unlock()
		if !j.started {
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
