package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// BenchmarkSubmissions1 is one caller waiting for each submission: every
// commit carries one batch, so this is PostgreSQL's commit latency.
func BenchmarkSubmissions1(b *testing.B) {
	storetest.BenchSubmissions(b, openTest(b, pgtest.DSN(b), Options{}), 1)
}

// BenchmarkSubmissions64 is the API server's pattern: 64 callers each
// submitting one job and waiting for it to be durable.
func BenchmarkSubmissions64(b *testing.B) {
	s := openTest(b, pgtest.DSN(b), Options{})
	storetest.BenchSubmissions(b, s, 64)
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(max(st.Commits, 1)), "batches/commit")
}

// BenchmarkSubmissions64Shared is BenchmarkSubmissions64 on a store opened
// as server replicas open it: each commit also writes the change feed
// (changes row and notification), which followers tail.
func BenchmarkSubmissions64Shared(b *testing.B) {
	s := openTest(b, pgtest.DSN(b), Options{Shared: true})
	storetest.BenchSubmissions(b, s, 64)
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(max(st.Commits, 1)), "batches/commit")
}

// BenchmarkSubmissions64Fenced is BenchmarkSubmissions64Shared as the
// leader of replicas writes: every batch also carries its lease's fence,
// checked in the commit's transaction.
func BenchmarkSubmissions64Fenced(b *testing.B) {
	s := openTest(b, pgtest.DSN(b), Options{Shared: true})
	l, err := s.Acquire(context.Background(), "controller", "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchSubmissions(b, fenced{s, l.Fence()}, 64)
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(max(st.Commits, 1)), "batches/commit")
}

// fenced sets its fence on every batch it submits, as the server's
// leader does.
type fenced struct {
	*Store
	fence *store.Fence
}

func (f fenced) Submit(b *store.Batch) <-chan error {
	b.Fence = f.fence
	return f.Store.Submit(b)
}

// Prepare fences b too: the embedded Store's would skip the fence.
func (f fenced) Prepare(b *store.Batch) func() <-chan error {
	b.Fence = f.fence
	return f.Store.Prepare(b)
}
