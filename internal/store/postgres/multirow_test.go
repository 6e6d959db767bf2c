package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/encode"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
)

// TestMultiRowMatchesOneRow writes the same groups of random batches two
// ways: with writeFast (each repeated statement once per group, its rows
// unnested) into one database, and one row per statement in order
// (writeIsolated, as the one-row forms) into another. The groups rewrite
// the same objects many times over, at higher, equal and lower versions,
// repeat idempotency keys and re-send audit entries and events: both
// databases must end up holding the same state.
func TestMultiRowMatchesOneRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	multi := openTest(t, pgtest.DSN(t), Options{})
	oneRow := openTest(t, pgtest.DSN(t), Options{})
	r := rand.New(rand.NewPCG(3, 4))
	coalesced := 0
	// The tables after every group (an object's last write in one group
	// may be overwritten by the next), read raw: Load deletes expired
	// idempotency keys and returns only the audit log's head.
	sameTables := func(g int) {
		for _, q := range []string{
			`SELECT id || ' ' || version || ' ' || data::text FROM jobs ORDER BY id`,
			`SELECT id || ' ' || version || ' ' || data::text FROM attempts ORDER BY id`,
			`SELECT seq || ' ' || data::text FROM events ORDER BY seq`,
			`SELECT seq || ' ' || data::text FROM audit ORDER BY seq`,
			`SELECT subject || '/' || key || ' ' || job_id || ' ' || encode(body_hash, 'hex') || ' ' || expires FROM idempotency ORDER BY subject, key`,
		} {
			want, got := tableRows(t, oneRow, q), tableRows(t, multi, q)
			if len(want) == 0 {
				t.Fatalf("after group %d, %s: no row in the one-row store", g, q)
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Fatalf("after group %d, %s: multi-row writes differ from one row a statement (-one-row +multi-row):\n%s", g, q, diff)
			}
		}
	}
	for g := range 40 {
		var group []batch
		for i := range 1 + r.IntN(24) {
			n := g*100 + i
			b := randomBatch(r, n)
			if r.IntN(3) == 0 && len(group) > 0 {
				// A re-sent audit entry and event: the first one stays.
				b.Audit = append(b.Audit, &model.AuditEntry{Seq: uint64(g*100 + 1), Action: fmt.Sprint("again ", n)})
				b.Events = append(b.Events, &model.Event{Seq: uint64(g*100 + 1), Kind: "job.queued", Message: fmt.Sprint("again ", n)})
			}
			rows, err := encode.Batch(b)
			if err != nil {
				t.Fatal(err)
			}
			group = append(group, batch{rows: rows})
		}
		pb := &pgx.Batch{}
		if err := queueRows(pb, group); err != nil {
			t.Fatal(err)
		}
		if pb.Len() < rowsIn(group) {
			coalesced++
		}
		if _, err := multi.writeDirect(ctx, group, false); err != nil {
			t.Fatalf("group %d, multi-row: %v", g, err)
		}
		errs, err := oneRow.writeDirect(ctx, group, true)
		if err != nil {
			t.Fatalf("group %d, one row a statement: %v", g, err)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("group %d batch %d, one row a statement: %v", g, i, err)
			}
		}
		sameTables(g)
	}
	if coalesced < 30 {
		t.Fatalf("only %d of 40 groups had statements coalesced: the test exercised little", coalesced)
	}
	got, err := multi.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := oneRow.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Load orders jobs by seq alone; this workload gives several jobs
	// one seq, so order ties by id.
	for _, d := range []*store.Dump{got, want} {
		slices.SortFunc(d.Jobs, func(a, b *model.Job) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID)) })
	}
	if len(want.Jobs) == 0 || len(want.Events) == 0 {
		t.Fatalf("the one-row store holds %d jobs, %d events: the test wrote nothing", len(want.Jobs), len(want.Events))
	}
	if diff := gocmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("multi-row writes differ from one row a statement (-one-row +multi-row):\n%s", diff)
	}
}

// tableRows reads a whole table as text, one row a line, by query: Load
// returns only the audit log's head and the unexpired idempotency keys.
func tableRows(t *testing.T, s *Store, query string) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeDirect writes group on one of s's committer connections, numbered
// after the last commit: with writeFast, or with isolated writeIsolated.
func (s *Store) writeDirect(ctx context.Context, group []batch, isolated bool) ([]error, error) {
	cc := <-s.free
	defer func() { s.free <- cc }()
	var last int64
	if err := cc.conn.QueryRow(ctx, readCommits).Scan(&last); err != nil {
		return nil, err
	}
	s.seqMu.Lock()
	s.tail = last + 1
	s.seqMu.Unlock()
	if isolated {
		return s.writeIsolated(ctx, cc.conn, group, last+1)
	}
	return make([]error, len(group)), s.writeFast(ctx, cc.conn, group, last+1)
}

func rowsIn(group []batch) int {
	n := 0
	for _, b := range group {
		n += len(b.rows)
	}
	return n
}
