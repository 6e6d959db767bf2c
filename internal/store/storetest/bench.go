package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Submission is the batch the API commits for one accepted job: the job,
// its idempotency record and its audit entry.
func Submission(i int) *store.Batch {
	id := fmt.Sprintf("j-%010d", i)
	j := Job(id, uint64(i+1), 1)
	return &store.Batch{
		Jobs:        []*model.Job{j},
		Idempotency: []store.Idempotency{Idempotency("ada", "k-"+id, id, T0.Add(24*time.Hour))},
		Access: store.Access{Audit: []*model.AuditEntry{{Seq: uint64(i + 1), Time: T0, Actor: "ada", TokenID: "t-1", Project: "nlp",
			Action: "POST /v1/jobs", Object: id, RequestID: "r-" + id, Result: 201, PrevHash: "ab12", Hash: "cd34"}}},
	}
}

// BenchSubmissions has callers goroutines each submit Submission batches
// and wait until each is durable, as the API's handlers do, and reports
// submissions/s.
func BenchSubmissions(b *testing.B, s store.Store, callers int) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				if err := <-s.Submit(Submission(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submissions/s")
}
