package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/controller/auditlog"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/groupcommit"
)

// orderStore records the batches submitted to it, in order, and makes each
// durable at once.
type orderStore struct {
	mu      sync.Mutex
	batches []*store.Batch
}

func (s *orderStore) Load(context.Context) (*store.Dump, error) { return &store.Dump{}, nil }
func (s *orderStore) Close() error                              { return nil }
func (s *orderStore) Submit(b *store.Batch) <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, b)
	return groupcommit.Failed(nil)
}

func (s *orderStore) submitted() []*store.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*store.Batch(nil), s.batches...)
}

func startCommitter(t *testing.T, st store.Store) *committer {
	t.Helper()
	com := newCommitter(st, func(err error) { t.Errorf("fatal: %v", err) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { com.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return com
}

func named(n string) *store.Batch { return &store.Batch{Meta: map[string]string{"n": n}} }

func names(bs []*store.Batch) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Meta["n"])
	}
	return out
}

// A reserved place holds back every batch after it, from the store and from
// being acknowledged, until it is filled; then all go in sequence order.
func TestReservedPlaceHoldsBackLaterBatches(t *testing.T) {
	t.Parallel()
	st := &orderStore{}
	com := startCommitter(t, st)
	first := com.submit(named("first"))
	held := com.reserve()
	after := com.submit(named("after"))
	if err := first.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := names(st.submitted()); len(got) != 1 {
		t.Fatalf("the store got %v while a place before them was reserved; want only [first]", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := after.wait(ctx); err == nil {
		t.Fatal("a batch after a reserved place was acknowledged before the place was filled")
	}
	if err := com.barrier(ctx, after.seq); err == nil {
		t.Fatal("the barrier passed a reserved place")
	}
	com.fill(held, named("held"))
	if err := after.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := com.barrier(context.Background(), after.seq); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(names(st.submitted())); got != "[first held after]" {
		t.Fatalf("store order %s, want [first held after]", got)
	}
}

// A reserved place whose later batches fill the queue to run is still
// filled: the submission waiting for room in the queue holds subMu, which
// fill must not need (the reviewer's probe: with fill on subMu this hung).
func TestFillPassesAFullQueue(t *testing.T) {
	t.Parallel()
	st := &orderStore{}
	com := newCommitter(st, func(err error) { t.Errorf("fatal: %v", err) })
	com.queue = make(chan *commit, 2)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { com.run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })

	held := com.reserve()
	// run takes held and waits for its fill; two more fill the queue and
	// the last waits for room, holding subMu.
	var later []*commit
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cm := com.submit(named(fmt.Sprint("later", i)))
			mu.Lock()
			later = append(later, cm)
			mu.Unlock()
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(com.queue) < cap(com.queue) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the rest reach the full queue

	filled := make(chan struct{})
	go func() { com.fill(held, named("held")); close(filled) }()
	select {
	case <-filled:
	case <-time.After(10 * time.Second):
		t.Fatal("fill blocked behind a submission waiting for room in the queue")
	}
	wg.Wait()
	for _, cm := range later {
		if err := cm.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := names(st.submitted()); len(got) != 5 || got[0] != "held" {
		t.Fatalf("store order %v, want held then the four later batches", got)
	}
}

// Places taken in one order (under a lock, as callers do) and filled in any
// other, after random delays, reach the store in the order taken.
func TestFillsInAnyOrderKeepThePlaces(t *testing.T) {
	t.Parallel()
	st := &orderStore{}
	com := startCommitter(t, st)
	var (
		order sync.Mutex // the callers' own lock
		taken []string
		wg    sync.WaitGroup
	)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := fmt.Sprint(i)
			order.Lock()
			taken = append(taken, n)
			if i%3 == 0 {
				cm := com.submit(named(n))
				order.Unlock()
				if err := cm.wait(context.Background()); err != nil {
					t.Error(err)
				}
				return
			}
			cm := com.reserve()
			order.Unlock()
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			com.fill(cm, named(n))
			if err := cm.wait(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, want := fmt.Sprint(names(st.submitted())), fmt.Sprint(taken); got != want {
		t.Fatalf("store order\n%s\nwant the order the places were taken\n%s", got, want)
	}
}

// Audit entries appended at once, through the reserving committer (their
// batches encoded after the chain's lock), reach the store in chain order.
func TestAuditEntriesReachTheStoreInChainOrder(t *testing.T) {
	t.Parallel()
	st := &orderStore{}
	com := startCommitter(t, st)
	// Reserving takes a while (a busy machine), so an entry linked but
	// not yet placed would be overtaken.
	l := auditlog.New(slowReserver{com}, clock.Real{}, nil)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				// Another component's batch between the entries.
				com.Commit(named(fmt.Sprint(i)))
			}
			if _, err := l.Audit(context.Background(), model.AuditEntry{Actor: "ada", Action: fmt.Sprintf("POST /v1/x/%d", i), Result: 200}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var entries []*model.AuditEntry
	for _, b := range st.submitted() {
		entries = append(entries, b.Access.Audit...)
	}
	if len(entries) != 100 {
		t.Fatalf("%d entries reached the store, want 100", len(entries))
	}
	if err := audit.Verify(entries); err != nil {
		t.Fatalf("the store's order breaks the chain: %v", err)
	}
}

// slowReserver is the committer with a delay before each reservation.
type slowReserver struct{ *committer }

func (s slowReserver) Reserve() func(*store.Batch) func(context.Context) error {
	time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
	return s.committer.Reserve()
}
