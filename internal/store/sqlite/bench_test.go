package sqlite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
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
