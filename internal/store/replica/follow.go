package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
)

// DefaultPoll is how long a Follower waits for a change notification before
// it reads the feed anyway (the polling fallback).
const DefaultPoll = time.Second

// pageSize is the most changes read at once.
const pageSize = 500

// Follower keeps a Mirror current with a store.Feed.
type Follower struct {
	feed store.Feed
	log  *slog.Logger
	poll time.Duration
	// onApply, when set, receives every change after the mirror applied
	// it; onReset, a new mirror after a snapshot (the first, or after the
	// feed was pruned past the mirror).
	onApply func(store.Change)
	onReset func(*Mirror)

	mu     sync.Mutex
	mirror *Mirror
	// current is when the last read that found the mirror caught up
	// with the feed began: the mirror held every change committed
	// before then.
	current time.Time
}

// Config is a Follower's.
type Config struct {
	Feed store.Feed
	Log  *slog.Logger
	// Poll bounds the wait for a notification (DefaultPoll).
	Poll    time.Duration
	OnApply func(store.Change)
	OnReset func(*Mirror)
}

// NewFollower takes a snapshot of cfg.Feed and returns a Follower holding
// it (OnReset is called with it).
func NewFollower(ctx context.Context, cfg Config) (*Follower, error) {
	f := &Follower{feed: cfg.Feed, log: cfg.Log, poll: cfg.Poll, onApply: cfg.OnApply, onReset: cfg.OnReset}
	if f.poll <= 0 {
		f.poll = DefaultPoll
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if err := f.snapshot(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Follower) snapshot(ctx context.Context) error {
	began := time.Now()
	d, seq, err := f.feed.Snapshot(ctx)
	if err != nil {
		return err
	}
	m := New(d, seq)
	f.mu.Lock()
	f.mirror, f.current = m, began
	f.mu.Unlock()
	if f.onReset != nil {
		f.onReset(m)
	}
	f.log.Info("replica: snapshot loaded", "seq", seq, "jobs", len(d.Jobs), "took", time.Since(began).Round(time.Millisecond).String())
	return nil
}

// Mirror returns the mirror the follower keeps current.
func (f *Follower) Mirror() *Mirror {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mirror
}

// Current returns when the last read that found the mirror caught up
// began: every change committed before that time is applied.
func (f *Follower) Current() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

// Run applies changes as they are committed until ctx ends. A feed
// error is logged and retried after the poll interval; a mirror the feed
// was pruned past is replaced by a new snapshot.
func (f *Follower) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := f.CatchUp(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, store.ErrChangesPruned):
			f.log.Warn("replica: the store pruned changes this replica had not applied; taking a new snapshot", "seq", f.Mirror().Seq())
			if err := f.snapshot(ctx); err != nil && ctx.Err() == nil {
				f.log.Warn("replica: snapshot failed; retrying", "err", err)
			}
			continue
		case err != nil:
			f.log.Warn("replica: reading the change feed failed; retrying", "err", err)
		}
		if n == 0 || err != nil {
			_ = f.feed.Wait(ctx, f.Mirror().Seq(), f.poll)
		}
	}
	return nil
}

// CatchUp applies every change committed before it was called and
// returns how many it applied.
func (f *Follower) CatchUp(ctx context.Context) (int, error) {
	total := 0
	for {
		began := time.Now()
		m := f.Mirror()
		cs, err := f.feed.Changes(ctx, m.Seq(), pageSize)
		if err != nil {
			return total, err
		}
		for _, c := range cs {
			if err := m.Apply(c); err != nil {
				return total, fmt.Errorf("replica: %w", err)
			}
			if f.onApply != nil {
				f.onApply(c)
			}
		}
		total += len(cs)
		if len(cs) < pageSize {
			f.mu.Lock()
			f.current = began
			f.mu.Unlock()
			return total, nil
		}
	}
}
