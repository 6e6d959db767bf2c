package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/clock"
)

// SamplerOptions configures a Sampler. The zero value samples every
// DefaultInterval, keeps DefaultKeep samples, on the wall clock.
type SamplerOptions struct {
	Interval time.Duration
	// Keep is how many recent samples Recent returns.
	Keep int
	// Timeout bounds one Sample call; zero means the interval.
	Timeout time.Duration
	Clock   clock.Clock
	// OnSample, if set, receives each sample on the sampling goroutine
	// (to feed efficiency histories, metrics). It must not block for
	// long, and must not keep s.GPUs past its return unless it copies it.
	OnSample func(s Sample)
	Logger   *slog.Logger
}

// Defaults of SamplerOptions.
const (
	DefaultInterval = 5 * time.Second
	DefaultKeep     = 120 // ten minutes at the default interval
)

// Sampler samples a Source at an interval and keeps the last samples in a
// ring. Run owns the Source; Latest and Recent are safe to call from any
// goroutine.
type Sampler struct {
	src  Source
	opts SamplerOptions

	mu   sync.Mutex
	ring []Sample
	next int // ring slot the next sample goes to
	n    int // samples in the ring
	errs int // consecutive failed samples
}

// NewSampler returns a sampler of src. It samples nothing until Run.
func NewSampler(src Source, opts SamplerOptions) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{src: src, opts: opts, ring: make([]Sample, opts.Keep)}
}

// Source returns the sampled source (for its Name and Missing).
func (s *Sampler) Source() Source { return s.src }

// Run samples now and then every interval until ctx ends. A failed sample
// is logged (once per run of failures) and skipped. Run does not close the
// source.
func (s *Sampler) Run(ctx context.Context) {
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		s.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// SampleOnce takes one sample now and records it; Run calls it on every
// tick. It reports whether the sample succeeded.
func (s *Sampler) SampleOnce(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	sample, err := s.src.Sample(ctx)
	if err != nil {
		s.mu.Lock()
		s.errs++
		first := s.errs == 1
		s.mu.Unlock()
		if first {
			s.opts.Logger.Warn("sampling GPU telemetry", "source", s.src.Name(), "err", err)
		}
		return false
	}
	if sample.Time.IsZero() {
		sample.Time = s.opts.Clock.Now()
	}
	s.mu.Lock()
	if s.errs > 0 {
		s.opts.Logger.Info("GPU telemetry back", "source", s.src.Name(), "failed_samples", s.errs)
		s.errs = 0
	}
	s.ring[s.next] = sample
	s.next = (s.next + 1) % len(s.ring)
	s.n = min(s.n+1, len(s.ring))
	s.mu.Unlock()
	if s.opts.OnSample != nil {
		s.opts.OnSample(sample)
	}
	return true
}

// Latest returns the newest sample, and false before the first.
func (s *Sampler) Latest() (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return Sample{}, false
	}
	return s.ring[(s.next-1+len(s.ring))%len(s.ring)], true
}

// Recent returns the kept samples, oldest first. The samples share their
// GPUs slices with the ring; treat them as read-only.
func (s *Sampler) Recent() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, s.n)
	for i := range s.n {
		out = append(out, s.ring[(s.next-s.n+i+len(s.ring))%len(s.ring)])
	}
	return out
}
