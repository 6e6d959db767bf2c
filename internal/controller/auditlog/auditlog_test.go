package auditlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/clock"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/testutil"
)

// Entries appended at once from many goroutines, alone or with another
// change (Chain), are committed in chain order, and the chain continues
// from a stored head.
func TestEntriesCommittedInChainOrder(t *testing.T) {
	t.Parallel()
	com := &testutil.Committer{}
	clk := clock.NewFake(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	l := New(com, clk, nil)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := model.AuditEntry{Actor: "ada", Action: fmt.Sprintf("GET /v1/jobs/%d", i), Result: 200}
			if i%2 == 0 {
				if _, err := l.Audit(context.Background(), e); err != nil {
					t.Error(err)
				}
				return
			}
			e.Time = clk.Now()
			l.Chain(&e, func() { com.Commit(&store.Batch{Access: store.Access{Audit: []*model.AuditEntry{&e}}}) })
		}()
	}
	wg.Wait()
	var entries []*model.AuditEntry
	for _, b := range com.Batches() {
		entries = append(entries, b.Access.Audit...)
	}
	if len(entries) != 40 {
		t.Fatalf("%d entries committed, want 40", len(entries))
	}
	if err := audit.Verify(entries); err != nil {
		t.Fatalf("committed order breaks the chain: %v", err)
	}
	next, err := New(&testutil.Committer{}, clk, entries[39]).Audit(context.Background(), model.AuditEntry{Actor: "bob", Action: "GET /v1/audit", Result: 200})
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Verify(append(entries, &next)); err != nil || next.Seq != 41 {
		t.Fatalf("entry after a restart: seq %d, %v", next.Seq, err)
	}
}
