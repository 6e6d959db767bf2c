package store

import (
	"context"
	"errors"
	"time"
)

// Change is one committed transaction of a store, as a replica following
// the store applies it: Seq numbers it (commits are numbered 1, 2, … in
// commit order), Batches are the batches it committed, in order.
type Change struct {
	Seq     uint64
	Batches []*Batch
}

// Feed is a store whose commits other processes can follow (the
// PostgreSQL store shared by server replicas): a follower takes a
// Snapshot, then applies every Change after it, in order, and so holds
// what Load would return without reading the tables again (package
// replica). Implementations are safe for concurrent use.
type Feed interface {
	// Snapshot returns what Load returns and the Seq of the last change
	// it includes, read in one transaction. Its Notifications include
	// the delivered ones (Delivered set), which a mirror keeps as the
	// store keeps them, so a later write of one is ignored.
	Snapshot(ctx context.Context) (*Dump, uint64, error)
	// Changes returns up to limit changes committed after the one
	// numbered after, in order; none when there are none yet. It fails
	// with ErrChangesPruned when changes after after are no longer kept
	// (a follower that fell that far behind takes a new Snapshot).
	Changes(ctx context.Context, after uint64, limit int) ([]Change, error)
	// Wait returns when a change after the one numbered after may have
	// been committed (a notification came), after d at most, or when ctx
	// ends.
	Wait(ctx context.Context, after uint64, d time.Duration) error
}

// ErrChangesPruned says the changes a follower asked for were pruned.
var ErrChangesPruned = errors.New("the store no longer keeps those changes; take a new snapshot")
