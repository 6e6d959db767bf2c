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

// batchRecorder is a backing store that keeps the batches handed to it,
// by way in, without storing them.
type batchRecorder struct {
	backingStore // nil: only Submit and Prepare are called
	submitted    []*store.Batch
	prepared     []*store.Batch
}

func (r *batchRecorder) Submit(b *store.Batch) <-chan error {
	r.submitted = append(r.submitted, b)
	ch := make(chan error, 1)
	ch <- nil
	return ch
}

func (r *batchRecorder) Prepare(b *store.Batch) func() <-chan error {
	r.prepared = append(r.prepared, b)
	return func() <-chan error { return r.Submit(b) }
}

// TestFencedStorePrepareFencesAsSubmit: fencedStore's Prepare puts the
// same fence on a batch as its Submit does, before the backing store sees
// it and before the batch is queued (its encoding may carry the fence),
// and passes it on to the backing store's Prepare rather than Submit.
// Needs no database: TestWrappersPassPrepareOn finds wrappers by reading
// the source; this checks what a known one does.
func TestFencedStorePrepareFencesAsSubmit(t *testing.T) {
	fence := &store.Fence{Lease: leader.LeaseName, Holder: "a http://a", Epoch: 7}
	rec := &batchRecorder{}
	fs := &fencedStore{backingStore: rec, fence: fence}
	if err := <-fs.Submit(&store.Batch{}); err != nil {
		t.Fatal(err)
	}
	queue := fs.Prepare(&store.Batch{})
	if len(rec.prepared) != 1 || len(rec.submitted) != 1 {
		t.Fatalf("after a Submit and a Prepare the backing store saw %d Prepares and %d Submits, want 1 and 1",
			len(rec.prepared), len(rec.submitted))
	}
	if got := rec.submitted[0].Fence; got != fence {
		t.Fatalf("Submit passed on a batch fenced with %p, want the leader's %p", got, fence)
	}
	if got := rec.prepared[0].Fence; got != rec.submitted[0].Fence {
		t.Errorf("Prepare passed on a batch fenced with %p, Submit with %p", got, rec.submitted[0].Fence)
	}
	if err := <-queue(); err != nil {
		t.Fatal(err)
	}
	if got := rec.submitted[1].Fence; got != fence {
		t.Errorf("the prepared batch was queued fenced with %p, want %p", got, fence)
	}
}
