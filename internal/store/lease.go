package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease is one term of leadership: Holder holds the lease Name from its
// Acquire until Expires, and Epoch numbers the term. Epochs only grow:
// every Acquire that succeeds starts a new term with a higher epoch, and a
// Renew keeps the epoch.
type Lease struct {
	Name    string
	Holder  string
	Epoch   uint64
	Expires time.Time
}

// Fence returns the fence that ties a batch to this term.
func (l Lease) Fence() *Fence { return &Fence{Lease: l.Name, Holder: l.Holder, Epoch: l.Epoch} }

// Fence ties a batch to one lease term (Batch.Fence): the store commits the
// batch only while the lease is still at that epoch and holder, checked in
// the same transaction as the writes, so a writer whose lease was taken
// over (a paused or partitioned old leader) can never commit.
type Fence struct {
	Lease  string
	Holder string
	Epoch  uint64
}

// Leaser elects one holder of a named lease among processes sharing a
// store. Expiry is judged by the database's clock, never the callers', so
// replicas with skewed clocks agree on it. Implementations are safe for
// concurrent use.
//
// The controller is meant to use it so (it does not yet; docs/postgres.md):
// every replica calls Acquire every TTL/3; the one that succeeds is leader,
// loads the store, and sets lease.Fence() on every batch it submits; it
// Renews every TTL/3 and, when a Renew fails or has not succeeded for
// about TTL/2, stops its loops (steps down) before the lease ends. A batch
// from an old term fails with a *FencedError, which the leader treats as
// "no longer leader", never as a retryable failure.
type Leaser interface {
	// Acquire takes the lease name for holder for ttl when it is free
	// (never held, released, or expired), starting a new term with the
	// next epoch. It fails with a *HeldError when another holder's term
	// is still running. A holder acquiring a lease it holds starts a new
	// term too, fencing its own older writes.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// Renew extends l's term to ttl from now (the database's now), keeping
	// its epoch. It fails with ErrLeaseLost when l's term is over: another
	// holder acquired the lease since. A term that expired but was not
	// taken over may still be renewed: fencing keeps that safe.
	Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// Release ends l's term now, so another holder can acquire the lease
	// without waiting for it to expire. Releasing a term that is already
	// over is not an error.
	Release(ctx context.Context, l Lease) error
}

// ErrLeaseLost is returned by Renew for a term that is over.
var ErrLeaseLost = errors.New("lease lost: another holder acquired it")

// ErrLeaseHeld is what a HeldError wraps.
var ErrLeaseHeld = errors.New("lease held by another holder")

// HeldError says that Acquire found the lease held.
type HeldError struct {
	Name, Holder string
	Epoch        uint64
	Expires      time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease %s: %v: %s holds epoch %d until %s", e.Name, ErrLeaseHeld, e.Holder, e.Epoch, e.Expires.UTC().Format(time.RFC3339Nano))
}

func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// ErrFenced is what a FencedError wraps.
var ErrFenced = errors.New("stale epoch: the batch's lease term is over")

// FencedError is the error of a batch whose Fence names a term that is over:
// nothing of it was written.
type FencedError struct {
	Fence Fence
	// Holder and Epoch are the lease's current term (Epoch 0 when the
	// lease was never acquired).
	Holder string
	Epoch  uint64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("lease %s: %v: the batch was written by %s at epoch %d, the lease is at epoch %d (%s)",
		e.Fence.Lease, ErrFenced, e.Fence.Holder, e.Fence.Epoch, e.Epoch, e.Holder)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// IsFenced reports whether err says a batch was refused for a stale epoch.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }

// ErrNoLeases is the error of a fenced batch submitted to a store without
// leases (SQLite: one process owns the file, so there is nothing to elect).
var ErrNoLeases = errors.New("this store has no leases, so it cannot commit a fenced batch")
