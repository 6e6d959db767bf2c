package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

// TestTakeoverWaitsForFencedCommit: a takeover cannot slip between a
// fenced batch's check and its commit. A transaction that has passed the
// fence (as a commit's pipeline does first) holds the lease row; an Acquire
// of the expired lease waits for it, and returns the new epoch only once
// that transaction has committed.
func TestTakeoverWaitsForFencedCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	a := openTest(t, dsn, Options{Shared: true})
	b := openTest(t, dsn, Options{Shared: true})
	la, err := a.Acquire(ctx, "controller", "a", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fenceOrFail, la.Name, la.Holder, int64(la.Epoch)); err != nil {
		t.Fatalf("fence in a's term: %v", err)
	}
	// Past a's expiry, while its fenced transaction is still open.
	time.Sleep(300 * time.Millisecond)
	type result struct {
		l   store.Lease
		err error
	}
	acquired := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, "controller", "b", time.Minute)
		acquired <- result{l, err}
	}()
	select {
	case r := <-acquired:
		t.Fatalf("b acquired the lease (%+v, %v) while a's fenced transaction was open", r.l, r.err)
	case <-time.After(time.Second):
	}
	if _, err := tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ('written-by', 'a')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("a's fenced commit: %v", err)
	}
	r := <-acquired
	if r.err != nil || r.l.Epoch != la.Epoch+1 {
		t.Fatalf("b's Acquire after a committed: %+v, %v; want epoch %d", r.l, r.err, la.Epoch+1)
	}
	// And from now on a's fence fails.
	if _, err := conn.Exec(ctx, fenceOrFail, la.Name, la.Holder, int64(la.Epoch)); err == nil {
		t.Errorf("a's fence passed after b's takeover")
	}
}
