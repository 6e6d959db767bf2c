package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// jobBatch is one submitted job, as the API server writes it.
func jobBatch(i int) *store.Batch {
	return &store.Batch{Jobs: []*model.Job{testJob(fmt.Sprintf("job-%d", i), uint64(i+1), 1)}}
}

// BenchmarkCommitSingle is one caller that waits for each job to be durable
// before submitting the next: every commit carries one batch.
func BenchmarkCommitSingle(b *testing.B) {
	s, _ := openTest(b, Options{})
	b.ResetTimer()
	for i := range b.N {
		if err := <-s.Submit(jobBatch(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkCommitConcurrent64 is the API server's pattern: 64 callers each
// submitting one job and waiting for it to be durable.
func BenchmarkCommitConcurrent64(b *testing.B) {
	const callers = 64
	s, _ := openTest(b, Options{})
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				if err := <-s.Submit(jobBatch(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(st.Commits), "batches/commit")
}

// BenchmarkLoad100k is a server start with 100,000 jobs stored.
func BenchmarkLoad100k(b *testing.B) {
	const jobs, perBatch = 100_000, 1000
	s, _ := openTest(b, Options{})
	for i := 0; i < jobs; i += perBatch {
		batch := &store.Batch{}
		for k := i; k < i+perBatch; k++ {
			batch.Jobs = append(batch.Jobs, jobBatch(k).Jobs...)
		}
		commit(b, s, batch)
	}
	b.ResetTimer()
	for range b.N {
		d, err := s.Load(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Jobs) != jobs {
			b.Fatalf("Load returned %d jobs, want %d", len(d.Jobs), jobs)
		}
	}
	b.ReportMetric(float64(jobs*b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEncodeSubmission is the store's share of one API submission on
// the caller's goroutine: a job, its idempotency record and its audit entry
// turned into rows.
func BenchmarkEncodeSubmission(b *testing.B) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	j := testJob("j-abcdefghij", 7, 1)
	j.SubmittedAt, j.EnqueuedAt = now, now
	batch := &store.Batch{
		Jobs:        []*model.Job{j},
		Idempotency: []store.Idempotency{{Subject: "ada", Key: "k-7", JobID: j.ID, BodyHash: make([]byte, 32), Expires: now.Add(24 * time.Hour)}},
		Access: store.Access{Audit: []*model.AuditEntry{{Seq: 7, Time: now, Actor: "ada", TokenID: "t-1", Project: "nlp",
			Action: "POST /v1/jobs", Object: j.ID, RequestID: "r-7", Result: 201, PrevHash: "ab12", Hash: "cd34"}}},
	}
	b.ReportAllocs()
	for b.Loop() {
		rows, err := encodeBatch(batch)
		if err != nil || len(rows) != 3 {
			b.Fatalf("encode = %d rows, %v; want 3", len(rows), err)
		}
	}
}

// BenchmarkSubmissions1 and BenchmarkSubmissions64 are the conformance
// suite's submission benchmarks, which the PostgreSQL store runs too.
func BenchmarkSubmissions1(b *testing.B) {
	s, _ := openTest(b, Options{})
	storetest.BenchSubmissions(b, s, 1)
}

func BenchmarkSubmissions64(b *testing.B) {
	s, _ := openTest(b, Options{})
	storetest.BenchSubmissions(b, s, 64)
	st := s.Stats()
	b.ReportMetric(float64(st.Batches)/float64(max(st.Commits, 1)), "batches/commit")
}
