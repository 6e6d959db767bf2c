package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/sqlite"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// fullBatch writes some of every kind of record, with a chained audit log.
func fullBatch(n int) []*store.Batch {
	var (
		out  []*store.Batch
		prev string
	)
	for i := range n {
		id := fmt.Sprintf("j-%04d", i)
		e := &model.AuditEntry{Time: storetest.T0.Add(time.Duration(i) * time.Second), Actor: "ada", Action: "POST /v1/jobs", Object: id, Result: 201}
		audit.Link(uint64(i), prev, e)
		prev = e.Hash
		b := &store.Batch{
			Jobs:        []*model.Job{storetest.Job(id, uint64(i+1), 2)},
			Attempts:    []*model.Attempt{storetest.Attempt(id, 1, 1)},
			Idempotency: []store.Idempotency{storetest.Idempotency("ada", "k-"+id, id, storetest.T0.Add(1000*time.Hour))},
			Events:      []*model.Event{{Seq: uint64(i + 1), Time: storetest.T0, Kind: "launch", Object: "job/" + id, Message: "m"}},
			Meta:        map[string]string{"job_seq": fmt.Sprint(i + 1)},
			Access:      store.Access{Audit: []*model.AuditEntry{e}},
			Cost: store.Cost{
				Ledger:  []model.LedgerEntry{{Kind: model.LedgerIdle, NodeID: "n-1", From: storetest.T0, To: storetest.T0.Add(time.Minute), Seconds: 60, Cost: model.Money(i)}},
				Metrics: []store.MetricReport{{JobID: id, Seq: 1, Step: 1, Values: store.MetricValues{"loss": math.Inf(1)}, At: storetest.T0}},
			},
		}
		if i == 0 {
			b.Nodes = []*model.Node{storetest.Node("n-1", 3)}
			b.Tokens = []*model.Token{storetest.Token("t-1")}
			b.Queues = []*model.Queue{{Name: "research", Version: 1}}
			b.Revisions = []*model.Revision{{Number: 1, CreatedAt: storetest.T0, Digest: "d1"}}
			b.Grants = []model.Grant{{User: "ada", Project: "nlp", Role: model.RoleMember}}
			b.Secrets = []model.Secret{{Project: "nlp", Name: "K", Sealed: "v1:x", Version: 1}}
			b.BudgetFired = []model.FiredKey{{Budget: "b", Threshold: 1, PeriodStart: storetest.T0}}
			b.Notifications = []*store.Notification{{ID: "b/1", Kind: "budget", Body: []byte(`{}`), NextAt: storetest.T0, Created: storetest.T0}}
		}
		out = append(out, b)
	}
	return out
}

// TestImportFromSQLite: a SQLite database copied into PostgreSQL loads the
// same, every record, with the audit chain verified in the target.
func TestImportFromSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	src, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for _, b := range fullBatch(n) {
		if err := store.Commit(ctx, src, b); err != nil {
			t.Fatal(err)
		}
	}
	want, err := src.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantAudit, err := src.Audit(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	exp, err := sqlite.OpenExport(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	dsn := pgtest.DSN(t)
	dst := openTest(t, dsn, Options{})
	rep, err := dst.Import(ctx, exp)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if rep.AuditEntries != n || rep.AuditHead != wantAudit[n-1].Hash {
		t.Errorf("report: %d audit entries, head %q; want %d, %q", rep.AuditEntries, rep.AuditHead, n, wantAudit[n-1].Hash)
	}
	for _, tc := range rep.Tables {
		if tc.Source != tc.Target || tc.Table == "jobs" && tc.Source != n {
			t.Errorf("table %s: source %d, target %d", tc.Table, tc.Source, tc.Target)
		}
	}
	got, err := dst.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("Load of the copy (-sqlite +postgres):\n%s", diff)
	}
	gotAudit, err := dst.Audit(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantAudit, gotAudit); diff != "" {
		t.Errorf("audit log of the copy (-sqlite +postgres):\n%s", diff)
	}

	// A second import into the same database is refused, and changes
	// nothing.
	if _, err := dst.Import(ctx, exp); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("second Import: got %v, want %v", err, ErrNotEmpty)
	}
	if again, err := dst.Load(ctx); err != nil || len(again.Jobs) != n {
		t.Errorf("after the refused import: %d jobs, %v", len(again.Jobs), err)
	}
}
