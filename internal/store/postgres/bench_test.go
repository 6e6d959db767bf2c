package postgres

import (
	"testing"

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
