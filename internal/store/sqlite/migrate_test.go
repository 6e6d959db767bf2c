package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEmbeddedMigrationsApply(t *testing.T) {
	t.Parallel()
	migs, err := embeddedMigrations()
	if err != nil {
		t.Fatalf("embeddedMigrations: %v", err)
	}
	if len(migs) == 0 {
		t.Fatal("no embedded migrations")
	}
	var want []int
	for _, m := range migs {
		want = append(want, m.Version)
	}
	s, path := openTest(t, Options{})
	if diff := cmp.Diff(want, appliedVersions(t, s.db)); diff != "" {
		t.Errorf("fresh database: applied versions (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Reopening applies nothing again.
	s = reopen(t, path, Options{})
	if diff := cmp.Diff(want, appliedVersions(t, s.db)); diff != "" {
		t.Errorf("reopened database: applied versions (-want +got):\n%s", diff)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, Options{})
	future := len(appliedVersions(t, s.db)) + 1
	if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, name) VALUES (?, 'from_the_future.sql')`, future); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	_, err := Open(context.Background(), path, Options{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open: got %v, want %v", err, ErrSchemaTooNew)
	}
	if !strings.Contains(err.Error(), "upgrade gpufleet") {
		t.Errorf("Open error %q does not tell the user to upgrade gpufleet", err)
	}
}

// TestMigrateSteps upgrades one database through a sequence of binaries,
// each knowing a different set of migrations.
func TestMigrateSteps(t *testing.T) {
	t.Parallel()
	m1 := migration{Version: 1, Name: "0001_a.sql", SQL: `CREATE TABLE a (x INTEGER)`}
	m2 := migration{Version: 2, Name: "0002_b.sql", SQL: `CREATE TABLE b (x INTEGER); INSERT INTO a VALUES (1)`}
	broken := migration{Version: 2, Name: "0002_broken.sql", SQL: `CREATE TABLE b (x INTEGER); INSERT INTO nowhere VALUES (1)`}

	db := openRaw(t)
	ctx, log := context.Background(), slog.New(slog.DiscardHandler)
	steps := []struct {
		name       string
		migs       []migration
		wantErr    string
		wantApply  []int
		wantTables []string
	}{
		{name: "first", migs: []migration{m1}, wantApply: []int{1}, wantTables: []string{"a"}},
		{name: "broken second is rolled back whole", migs: []migration{m1, broken}, wantErr: "applying migration 0002_broken.sql: ", wantApply: []int{1}, wantTables: []string{"a"}},
		{name: "second", migs: []migration{m1, m2}, wantApply: []int{1, 2}, wantTables: []string{"a", "b"}},
		{name: "older binary", migs: []migration{m1}, wantErr: ErrSchemaTooNew.Error(), wantApply: []int{1, 2}, wantTables: []string{"a", "b"}},
	}
	for _, step := range steps {
		err := migrate(ctx, db, step.migs, log)
		if step.wantErr == "" && err != nil || step.wantErr != "" && (err == nil || !strings.Contains(err.Error(), step.wantErr)) {
			t.Fatalf("%s: migrate error = %v, want %q", step.name, err, step.wantErr)
		}
		if diff := cmp.Diff(step.wantApply, appliedVersions(t, db)); diff != "" {
			t.Errorf("%s: applied versions (-want +got):\n%s", step.name, diff)
		}
		if diff := cmp.Diff(step.wantTables, userTables(t, db)); diff != "" {
			t.Errorf("%s: tables (-want +got):\n%s", step.name, diff)
		}
	}
}

func openRaw(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "raw.db")))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func appliedVersions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	return queryColumn[int](t, db, `SELECT version FROM schema_migrations ORDER BY version`)
}

func userTables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return queryColumn[string](t, db, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name != 'schema_migrations' ORDER BY name`)
}

func queryColumn[T any](t *testing.T, db *sql.DB, query string) []T {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
