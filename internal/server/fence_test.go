package server

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/server/leader"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestFencedStore: every batch through the leader's store carries its
// fence, so once another replica holds the lease the old leader's writes
// fail with a FencedError and are not stored.
func TestFencedStore(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, dsn, postgres.Options{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	la, err := a.Acquire(ctx, leader.LeaseName, "a http://a", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	fa := &fencedStore{backingStore: a, fence: la.Fence()}
	if err := store.Commit(ctx, fa, &store.Batch{Meta: map[string]string{"k": "a1"}}); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
	time.Sleep(400 * time.Millisecond) // a pauses past its lease
	if _, err := b.Acquire(ctx, leader.LeaseName, "b http://b", time.Minute); err != nil {
		t.Fatal(err)
	}
	err = store.Commit(ctx, fa, &store.Batch{Meta: map[string]string{"k": "a2"}})
	if !store.IsFenced(err) {
		t.Fatalf("the old leader's commit after the takeover = %v, want fenced", err)
	}
	// The committer's way in (encoded first, queued later) is fenced
	// alike, and stays apart: a wrapper without Prepare would have the
	// committer encode under its lock.
	if _, ok := any(fa).(store.Preparer); !ok {
		t.Fatal("fencedStore is no store.Preparer")
	}
	if err := <-store.Prepare(fa, &store.Batch{Meta: map[string]string{"k": "a3"}})(); !store.IsFenced(err) {
		t.Fatalf("the old leader's prepared commit after the takeover = %v, want fenced", err)
	}
	d, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Meta["k"] != "a1" {
		t.Errorf("meta k = %q, want a1: the fenced write must not be stored", d.Meta["k"])
	}
}
