package postgres

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpufleet/gpufleet/internal/model"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/postgres/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/schema"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// openTest opens a Store on dsn and closes it when t ends.
func openTest(t testing.TB, dsn string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t testing.TB) func(storetest.Options) storetest.Store {
		dsn := pgtest.DSN(t)
		return func(o storetest.Options) storetest.Store {
			return openTest(t, dsn, Options{MaxBatch: o.MaxBatch, Clock: o.Clock, CommitObserver: o.CommitObserver})
		}
	})
}

func TestLeases(t *testing.T) {
	storetest.RunLeases(t, func(t testing.TB) func() storetest.LeaseStore {
		dsn := pgtest.DSN(t)
		return func() storetest.LeaseStore { return openTest(t, dsn, Options{Shared: true}) }
	})
}

// TestAppendOnly: the audit log and the ledger refuse UPDATE, DELETE and
// TRUNCATE from gpufleet's own role (here a superuser), and the rows stay.
func TestAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := openTest(t, dsn, Options{})
	if err := store.Commit(ctx, s, &store.Batch{
		Access: store.Access{Audit: []*model.AuditEntry{{Seq: 1, Time: storetest.T0, Action: "POST /v1/jobs", Result: 201, Hash: "h1"}}},
		Cost:   store.Cost{Ledger: []model.LedgerEntry{{Kind: model.LedgerIdle, NodeID: "n-1", From: storetest.T0, To: storetest.T0.Add(60e9), Seconds: 60, Cost: 100}}},
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`UPDATE audit SET data = '{"seq":1,"action":"forged"}'`,
		`DELETE FROM audit`,
		`TRUNCATE audit`,
		`UPDATE ledger_entries SET cost = 0`,
		`DELETE FROM ledger_entries`,
		`TRUNCATE ledger_entries`,
	} {
		_, err := conn.Exec(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "is append-only") {
			t.Errorf("%s: got %v, want the append-only refusal", q, err)
		}
	}
	d, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.AuditHead == nil || d.AuditHead.Action != "POST /v1/jobs" || len(d.Ledger) != 1 || d.Ledger[0].Cost != 100 {
		t.Errorf("after the refused changes: audit head %+v, ledger %+v", d.AuditHead, d.Ledger)
	}
}

// TestSecondWriterRefused: without Shared, one Store writes a database; a
// second is refused until the first closes.
func TestSecondWriterRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	first, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, dsn, Options{LockWait: 300 * time.Millisecond})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "gpufleet from") {
		t.Fatalf("second Open: got %v, want %v naming the holder", err, ErrInUse)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openTest(t, dsn, Options{})
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	migs, _ := embeddedMigrations()
	if _, err := s.pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future.sql')`, len(migs)+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, dsn, Options{})
	if !errors.Is(err, schema.ErrTooNew) || !strings.Contains(err.Error(), "upgrade gpufleet") {
		t.Fatalf("Open: got %v, want %v telling to upgrade", err, schema.ErrTooNew)
	}
}

// TestPasswordNeverInErrors: a DSN's password appears in no error Open
// returns, whether the DSN is malformed or the password is wrong.
func TestPasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	pw := pgtest.Password(t)
	wrong := strings.Replace(dsn, pw, "Sekr1t-wrong-pass", 1)
	tests := map[string]struct{ dsn, secret string }{
		"wrong password": {dsn: wrong, secret: "Sekr1t-wrong-pass"},
		"bad port":       {dsn: strings.Replace(dsn, "@127.0.0.1:", "@127.0.0.1:x", 1), secret: pw},
		"bad option":     {dsn: dsn + "&sslmode=bogus", secret: pw},
		"password param": {dsn: strings.Replace(dsn, ":"+pw+"@", "@", 1) + "&password=Sekr1t-param", secret: "Sekr1t-param"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := Open(context.Background(), tc.dsn, Options{})
			if err == nil {
				s.Close()
				if name != "password param" {
					t.Fatalf("Open succeeded")
				}
				return
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error reveals the password: %v", err)
			}
			if d := Describe(tc.dsn); strings.Contains(d, tc.secret) {
				t.Errorf("Describe reveals the password: %s", d)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"postgres://gf:hunter2@db.example:5432/fleet?sslmode=require": "postgres://gf:xxxxx@db.example:5432/fleet?sslmode=require",
		"postgresql://gf@db/fleet?password=hunter2":                   "postgresql://gf@db/fleet?password=xxxxx",
		"postgres://db/fleet":                                         "postgres://db/fleet",
		"postgres://gf:hunter2@db:bad port/x":                         "postgres://(unparsable)",
	}
	for in, want := range tests {
		if got := Describe(in); got != want {
			t.Errorf("Describe(%q) = %q, want %q", in, got, want)
		}
	}
}
