// Package store is the control plane's durable storage: the interface the
// controller writes through, and the records it keeps. The embedded default
// is SQLite (package sqlite); a replicated control plane will use PostgreSQL
// behind the same interface.
//
// The controller keeps every live object in memory (DESIGN.md §1) and uses the
// store as the truth on disk: it loads everything once at start, then submits
// batches of upserts. The store never decides anything; it only makes the
// controller's decisions durable, in order.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
)

// Store persists control-plane objects. Implementations are safe for
// concurrent use.
type Store interface {
	// Load reads every stored object. It is called once, at start, before
	// any Submit.
	Load(ctx context.Context) (*Dump, error)
	// Submit queues b to be written and returns at once. Batches become
	// durable in the order Submit was called; batches submitted while a
	// commit is in flight are grouped into the next transaction. The
	// channel yields nil once b is durable (synced to disk), or the error
	// that stopped it, and is then closed. An upsert whose Version is lower
	// than the stored row's is ignored, so a late write never rolls an
	// object back; likewise a revoked token stays revoked.
	Submit(b *Batch) <-chan error
	// Close commits what was submitted, then releases the database.
	Close() error
}

// Committer puts batches onto the one Store that several components of the
// control plane share (the scheduler's state, identity, audit, vault), in one
// order: a component calls Commit while it holds its own lock, so its
// batches reach the store in the order its changes reached memory. Commit
// returns at once; wait blocks until b is durable or ctx ends. A batch that
// fails to commit stops the process (the committer reports it), so a caller
// only answers its own request with wait's error.
type Committer interface {
	Commit(b *Batch) (wait func(ctx context.Context) error)
}

// Reserver is a Committer that can hold a batch's place in the order before
// the batch is ready. A caller reserves under its lock, where the order is
// decided, and fills the place after releasing it, so the batch's encoding
// runs outside every lock; batches reserved or committed after the place
// reach the store only once it is filled. fill must be called exactly once.
type Reserver interface {
	Reserve() (fill func(b *Batch) (wait func(ctx context.Context) error))
}

// Preparer is a Store that can encode a batch apart from queueing it:
// Prepare encodes b (which needs no lock) and returns the function that
// queues it, as Submit(b) would. An encoding error is returned by the
// queueing function's channel. b must not change in between.
//
// A wrapper of a Store declares Prepare, doing to b what its Submit does
// and passing it on with Prepare (the package func): a wrapped interface
// does not promote it, and an embedded concrete store's would skip the
// wrapper's own work. TestWrappersPassPrepareOn checks every wrapper in
// the tree.
type Preparer interface {
	Prepare(b *Batch) (submit func() <-chan error)
}

// Prepare is s's Prepare of b, or for a store that is no Preparer a
// function that submits b.
func Prepare(s Store, b *Batch) func() <-chan error {
	if p, ok := s.(Preparer); ok {
		return p.Prepare(b)
	}
	return func() <-chan error { return s.Submit(b) }
}

// Commit submits b and waits until it is durable or ctx ends.
func Commit(ctx context.Context, s Store, b *Batch) error {
	select {
	case err := <-s.Submit(b):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Batch is one atomic set of upserts. A nil or empty field writes nothing.
type Batch struct {
	Jobs        []*model.Job
	Attempts    []*model.Attempt
	Nodes       []*model.Node
	Tokens      []*model.Token
	Idempotency []Idempotency
	// Queues are upserted by Version like jobs; DeleteQueues removes
	// queues by name (after the upserts).
	Queues       []*model.Queue
	DeleteQueues []string
	// Revisions are inserted once, by number; a revision already stored
	// is left as it is (revisions never change), so a retried write is
	// harmless. A fleet apply puts its revision and the queues it changes
	// in one batch, so both or neither are durable.
	Revisions []*model.Revision
	// Meta sets small named values (counters, settings).
	Meta map[string]string
	// Events are inserted once, by Seq; one already stored is left as it
	// is, so a retried write is harmless.
	Events []*model.Event
	// Services are upserted by name, guarded by Generation like a
	// version; DeleteServices removes services by name (after the
	// upserts).
	Services       []*model.Service
	DeleteServices []string
	// Cost holds the ledger, budget firings, job metrics and the webhook
	// outbox (see cost.go).
	Cost
	// Access holds grants and audit entries (see access.go).
	Access
	// Fence, when set, ties the batch to a lease term (see Leaser): it is
	// committed only while that term is current, and fails with a
	// *FencedError otherwise. A store without leases refuses fenced
	// batches. A fence alone writes nothing.
	Fence *Fence
}

// Empty reports whether b writes nothing.
func (b *Batch) Empty() bool {
	return b == nil || len(b.Jobs)+len(b.Attempts)+len(b.Nodes)+len(b.Tokens)+len(b.Idempotency)+len(b.Meta)+len(b.Queues)+len(b.DeleteQueues)+len(b.Revisions)+len(b.Events)+len(b.Services)+len(b.DeleteServices) == 0 && b.Cost.empty() && b.Access.empty()
}

// Idempotency maps a client's Idempotency-Key to the job it created, per
// token subject, until Expires.
type Idempotency struct {
	Subject string `json:"subject"`
	Key     string `json:"key"`
	JobID   string `json:"jobId"`
	// BodyHash is the SHA-256 of the request body, so a reused key with a
	// different body can be refused.
	BodyHash []byte    `json:"bodyHash"`
	Expires  time.Time `json:"expires"`
}

// Dump is everything Load returns.
type Dump struct {
	Jobs        []*model.Job
	Attempts    []*model.Attempt
	Nodes       []*model.Node
	Tokens      []*model.Token
	Idempotency []Idempotency
	Queues      []*model.Queue
	// Revisions are every fleet revision, by number.
	Revisions []*model.Revision
	// Events are the most recent MaxLoadedEvents events, by Seq.
	Events []*model.Event
	// Services are every service, by name.
	Services []*model.Service
	Meta     map[string]string
	// Cost: the whole ledger in append order, the fired keys, every
	// metric report and the undelivered notifications.
	Cost
	// AccessDump: every grant and the audit log's head.
	AccessDump
}

// MaxLoadedEvents bounds the events Load returns; older ones stay on disk.
const MaxLoadedEvents = 100000

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("store closed")
