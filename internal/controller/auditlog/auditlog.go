// Package auditlog appends to the control plane's hash-chained audit log
// (package audit does the hashing). It owns the chain's head and its own
// lock, apart from the scheduler's, so recording an API request does not
// wait for a scheduling pass.
//
// An entry is linked, and its place in the shared store.Committer's order
// taken, under the lock, so entries reach the store in chain order: a crash
// can lose only the newest entries, never one in the middle of the chain.
// Where the committer can reserve a place (store.Reserver), the entry's
// batch is encoded and given after the lock is released, so the lock
// covers only the link and the numbering.
package auditlog

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Log is the audit chain's head. Its methods are safe for concurrent use.
type Log struct {
	committer store.Committer
	clock     clock.Clock

	// mu guards the head, and is held while an entry is submitted.
	mu   sync.Mutex
	seq  uint64
	hash string
}

// New returns a Log that chains onto head, the newest stored entry (nil
// when the log is empty); clk nil means clock.Real{}.
func New(committer store.Committer, clk clock.Clock, head *model.AuditEntry) *Log {
	if clk == nil {
		clk = clock.Real{}
	}
	l := &Log{committer: committer, clock: clk, hash: audit.Genesis}
	if head != nil {
		l.seq, l.hash = head.Seq, head.Hash
	}
	return l
}

// Audit appends e to the chain and waits until it is durable, even if ctx
// ends first. It sets e's time, sequence number and hashes.
func (l *Log) Audit(ctx context.Context, e model.AuditEntry) (model.AuditEntry, error) {
	e.Time = l.clock.Now()
	var (
		wait func(context.Context) error
		fill func(*store.Batch) func(context.Context) error
	)
	r, reserves := l.committer.(store.Reserver)
	l.Chain(&e, func() {
		if reserves {
			fill = r.Reserve()
		} else {
			wait = l.committer.Commit(&store.Batch{Access: store.Access{Audit: []*model.AuditEntry{&e}}})
		}
	})
	if fill != nil {
		wait = fill(&store.Batch{Access: store.Access{Audit: []*model.AuditEntry{&e}}})
	}
	if err := wait(context.WithoutCancel(ctx)); err != nil {
		return e, fmt.Errorf("recording audit entry: %w", err)
	}
	return e, nil
}

// Chain links e (its Time set by the caller) to the head, and calls submit
// with the chain held; submit must submit the batch that records e, or
// reserve its place in the committer's order, so that entries reach the
// store in chain order. It is how an entry is
// committed with the change it records (a job's submission), in one batch.
func (l *Log) Chain(e *model.AuditEntry, submit func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	audit.Link(l.seq, l.hash, e)
	l.seq, l.hash = e.Seq, e.Hash
	submit()
}
